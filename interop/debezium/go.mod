module github.com/outbox-relay/outbox-relay/interop/debezium

go 1.26.0

require (
	github.com/jackc/pgx/v5 v5.13.0
	github.com/outbox-relay/outbox-relay v0.0.0
	github.com/segmentio/kafka-go v0.4.51
	golang.org/x/sync v0.23.0
)

require (
	github.com/bufbuild/protocompile v0.14.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.4 // indirect
	github.com/klauspost/compress v1.20.5 // indirect
	github.com/pierrec/lz4/v4 v4.1.34 // indirect
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	github.com/twmb/avro v1.9.1 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace github.com/outbox-relay/outbox-relay => ../..
