package config

import "time"

// The flags, by group, declared as the fields they fill: kong parses a
// command line into the groups its command embeds (cli.go). Each flag's
// tags:
//   - to: where its value goes in config (config.fill); a path under
//     Relay is a relay.Config field, whose default (relay.DefaultConfig)
//     and name in library errors ("Publish.MaxBatch") it takes;
//   - field: the name library errors give it, when not to's;
//   - secret: never printed ("dsn": a connection string, whose password
//     is masked); also read from <ENV>_FILE;
//   - type:"size": a byte count with units (16MiB);
//   - optional: empty is a value (otherwise a flag with a default
//     refuses it);
//   - negate: sets the negation of its field (--failover-slot and
//     NoFailoverSlot);
//   - example: what a missing required value's error suggests;
//   - rule: a rule over several flags' fields ("Leader").

// LogFlags are every command's logging flags.
type LogFlags struct {
	LogLevel  string `name:"log-level" help:"log level: debug, info, warn, error" default:"info" to:"LogLevel"`
	LogFormat string `name:"log-format" help:"log format: json or console" default:"json" to:"LogFormat"`
}

// DBFlags are the PostgreSQL flags of every command that connects to it.
type DBFlags struct {
	DatabaseURL          string `name:"database-url" help:"PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=/etc/ssl/pg-ca.pem, or key=value connection string, e.g. 'host=db dbname=app user=relay sslmode=verify-full'" to:"Relay.Database.URL" secret:"dsn" example:"postgres://user:pass@host:5432/db"`
	Slot                 string `name:"slot" help:"logical replication slot name" to:"Relay.Database.Slot"`
	Publication          string `name:"publication" help:"publication name" to:"Relay.Database.Publication"`
	Table                string `name:"table" help:"outbox table, optionally schema-qualified" to:"Relay.Database.Table"`
	DatabasePasswordFile string `name:"database-password-file" help:"file holding the PostgreSQL password, re-read at every connection, so a rotated secret (a mounted Kubernetes secret) is used without a restart; one trailing newline is dropped; instead of a password in --database-url" to:"PGAuth.PasswordFile"`
	DatabaseAuth         string `name:"database-auth" help:"how to authenticate to PostgreSQL: password (--database-url's or --database-password-file's) or aws-rds-iam (a fresh RDS IAM token as the password at every connection; needs TLS: sslmode=verify-full)" default:"password" to:"PGAuth.Auth"`
	DatabaseAWSRegion    string `name:"database-aws-region" help:"AWS region of the RDS instance, for --database-auth aws-rds-iam (default: AWS_REGION or the AWS config's)" to:"PGAuth.AWSRegion"`
}

// KafkaFlags are every Kafka client's flags: the brokers, the metadata
// TTL, and the TLS and SASL of every connection.
type KafkaFlags struct {
	KafkaBrokers                string        `name:"kafka-brokers" help:"comma-separated Kafka bootstrap brokers, e.g. 127.0.0.1:9092" to:"KafkaBrokers" field:"Kafka.Brokers" example:"host:9092[,host2:9092]"`
	MetadataTtl                 time.Duration `name:"metadata-ttl" help:"Kafka metadata refresh; bounds the stall after a partition leader change" to:"Relay.Kafka.MetadataTTL"`
	KafkaTls                    bool          `name:"kafka-tls" help:"connect to Kafka with TLS (implied by any --kafka-tls-* file or name)" to:"KafkaConn.TLS.Enabled"`
	KafkaTLSCAFile              string        `name:"kafka-tls-ca-file" help:"PEM CA bundle that signed the brokers' certificates (default: system roots)" to:"KafkaConn.TLS.CAFile"`
	KafkaTlsCertFile            string        `name:"kafka-tls-cert-file" help:"PEM client certificate, for brokers with ssl.client.auth=required" to:"KafkaConn.TLS.CertFile"`
	KafkaTlsKeyFile             string        `name:"kafka-tls-key-file" help:"PEM private key (unencrypted) of --kafka-tls-cert-file" to:"KafkaConn.TLS.KeyFile"`
	KafkaTlsServerName          string        `name:"kafka-tls-server-name" help:"name the brokers' certificates must carry (default: each broker's host)" to:"KafkaConn.TLS.ServerName"`
	KafkaTlsInsecureSkipVerify  bool          `name:"kafka-tls-insecure-skip-verify" help:"accept any broker certificate (tests only: anyone can impersonate the broker)" to:"KafkaConn.TLS.InsecureSkipVerify"`
	KafkaSaslMechanism          string        `name:"kafka-sasl-mechanism" help:"SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (empty: no SASL)" to:"KafkaConn.SASL.Mechanism"`
	KafkaSaslUsername           string        `name:"kafka-sasl-username" help:"SASL username" to:"KafkaConn.SASL.Username"`
	KafkaSaslPassword           string        `name:"kafka-sasl-password" help:"SASL password" to:"KafkaConn.SASL.Password" secret:""`
	KafkaSaslOauthTokenFile     string        `name:"kafka-sasl-oauth-token-file" help:"OAUTHBEARER: file holding the token (a JWT), re-read for every new connection (a sidecar keeps it fresh)" to:"KafkaConn.SASL.OAuth.TokenFile"`
	KafkaSaslOauthTokenEndpoint string        `name:"kafka-sasl-oauth-token-endpoint" help:"OAUTHBEARER: the identity provider's token URL, for the OAuth client-credentials grant" to:"KafkaConn.SASL.OAuth.TokenEndpoint"`
	KafkaSaslOauthClientId      string        `name:"kafka-sasl-oauth-client-id" help:"OAUTHBEARER client-credentials: client id" to:"KafkaConn.SASL.OAuth.ClientID"`
	KafkaSaslOauthClientSecret  string        `name:"kafka-sasl-oauth-client-secret" help:"OAUTHBEARER client-credentials: client secret" to:"KafkaConn.SASL.OAuth.ClientSecret" secret:""`
	KafkaSaslOauthScope         string        `name:"kafka-sasl-oauth-scope" help:"OAUTHBEARER client-credentials: space-separated scope (empty: the client's default)" to:"KafkaConn.SASL.OAuth.Scope"`
	KafkaSaslOauthExtensions    string        `name:"kafka-sasl-oauth-extensions" help:"OAUTHBEARER: SASL extensions sent with the token, key=value,... (Confluent Cloud: logicalCluster=lkc-...,identityPoolId=pool-...)" to:"KafkaConn.SASL.OAuth.Extensions"`
	KafkaSaslSessionLifetime    time.Duration `name:"kafka-sasl-session-lifetime" help:"the brokers' connections.max.reauth.ms, if set: Kafka connections are recycled before it (and before a token expires), since kafka-go cannot re-authenticate (0: token expiry only)" to:"Relay.Kafka.SessionLifetime"`
}

// TopicFlags name an event's topic: the commands that publish, and those
// that find what was published (reconcile, doctor).
type TopicFlags struct {
	TopicTemplate string `name:"topic-template" help:"topic name template; placeholders {aggregate_type}, {event_type}" to:"Relay.Publish.TopicTemplate"`
}

// ProducerFlags are what every producer of the binary writes with, and
// doctor checks: the idempotent producer and the reserved positions topic.
type ProducerFlags struct {
	Idempotent     bool   `name:"idempotent" help:"write with the idempotent producer (a producer id, numbered batches), so the broker discards a retried batch it already stored; false only for brokers or ACLs that refuse it (docs/kafka.md)" to:"Relay.Publish.NoIdempotence" negate:""`
	PositionsTopic string `name:"positions-topic" help:"with --delivery exactly-once: the compacted topic where each Kafka transaction records the source position it covers, keyed by <system identifier>/<database>/<slot>; several relays may share it" to:"Relay.Publish.PositionsTopic"`
}

// PublishFlags are the flags of every command that publishes (run,
// recover, replay, dlq retry and discard): topics, batching, retries and
// the record format.
type PublishFlags struct {
	TopicFlags
	ProducerFlags
	CreateTopics              bool          `name:"create-topics" help:"create missing topics" to:"Relay.Publish.CreateTopics"`
	TopicPartitions           int           `name:"topic-partitions" help:"partitions of topics the relay creates" to:"Relay.Publish.TopicPartitions"`
	TopicReplicationFactor    int           `name:"topic-replication-factor" help:"replication factor of topics the relay creates (-1: broker default)" to:"Relay.Publish.TopicReplicationFactor"`
	MaxBatch                  int           `name:"max-batch" help:"most events in one partition batch" to:"Relay.Publish.MaxBatch"`
	MaxBatchBytes             int           `name:"max-batch-bytes" help:"most bytes in one partition batch, e.g. 900KiB; keep under the broker's message.max.bytes" to:"Relay.Publish.MaxBatchBytes" type:"size"`
	Linger                    time.Duration `name:"linger" help:"how long a partition batch waits for other partitions' batches to share its produce request (0: send at once)" to:"Relay.Publish.Linger"`
	BackoffBase               time.Duration `name:"backoff-base" help:"first retry delay (exponential, full jitter)" to:"Relay.Publish.BackoffBase"`
	BackoffMax                time.Duration `name:"backoff-max" help:"longest retry delay" to:"Relay.Publish.BackoffMax"`
	UnknownTopicTimeout       time.Duration `name:"unknown-topic-timeout" help:"how long a missing topic is retried before its events are poison (without --create-topics), and a partition that vanished before the relay stops" to:"Relay.Publish.UnknownTopicTimeout"`
	PartitionRefresh          time.Duration `name:"partition-refresh" help:"how often a topic's partition count is re-read (added partitions are used once the topic's earlier events are acknowledged)" to:"Relay.Publish.PartitionRefresh"`
	WriteTimeout              time.Duration `name:"write-timeout" help:"how long one produce request may take before it is retried" to:"Relay.Publish.WriteTimeout"`
	MetadataTimeout           time.Duration `name:"metadata-timeout" help:"how long one of the relay's own metadata questions (a topic's partitions and leaders) may take; a silent broker then shows as a logged, counted failure" to:"Relay.Publish.MetadataTimeout"`
	TopicIdleTimeout          time.Duration `name:"topic-idle-timeout" help:"how long an unused topic keeps its router and partition lanes (goroutines, queues)" to:"Relay.Publish.TopicIdleTimeout"`
	CloudeventsSource         string        `name:"cloudevents-source" help:"CloudEvents source attribute, a URI-reference naming the producer, e.g. /orders-service; required with --record-format cloudevents" to:"Relay.Publish.Record.CloudEventsSource"`
	CloudeventsMode           string        `name:"cloudevents-mode" help:"CloudEvents content mode: binary (attributes in ce_* headers, the payload as the value) or structured (the event as a JSON value)" to:"Relay.Publish.Record.CloudEventsMode"`
	DebeziumExpandJsonPayload bool          `name:"debezium-expand-json-payload" help:"with --record-format debezium: write JSON payloads as the router does with table.expand.json.payload=true and the JsonConverter (compact, null members dropped)" to:"Relay.Publish.Record.DebeziumExpandJSON"`
	TombstoneOnNullPayload    bool          `name:"tombstone-on-null-payload" help:"an outbox row with a NULL payload becomes a tombstone (its key and headers, a null value) for compacted topics, instead of a poison event" to:"Relay.Publish.Record.TombstoneOnNullPayload"`
	FormatFlags
}

// FormatFlags are the record format and the registry formats' settings
// (--record-format avro, protobuf, json-schema): which schema encodes an
// event, and where the registry is; without such a format each of those
// is refused. The commands that publish take them, and doctor, which
// checks the registry.
type FormatFlags struct {
	RecordFormat            string        `name:"record-format" help:"record format: native, debezium (the record Debezium's Outbox Event Router emits), cloudevents (docs/formats.md), or avro, protobuf or json-schema: the JSON payload encoded with its schema from --schema-registry-url, in the Confluent wire format (docs/schemas.md)" to:"Relay.Publish.Record.Format"`
	SchemaRegistryUrl       string        `name:"schema-registry-url" help:"base URL of the Confluent-compatible schema registry API, e.g. https://registry:8081 or Apicurio's http://host:8080/apis/ccompat/v7; a user:password in it is basic auth; required with a registry format" to:"Relay.Publish.Record.Registry.URL" secret:"dsn" example:"https://registry:8081"`
	SchemaRegistryUsername  string        `name:"schema-registry-username" help:"basic auth user of the registry (Confluent Cloud: the API key)" to:"Relay.Publish.Record.Registry.Username"`
	SchemaRegistryPassword  string        `name:"schema-registry-password" help:"basic auth password of the registry (Confluent Cloud: the API secret)" to:"Relay.Publish.Record.Registry.Password" secret:""`
	SchemaRegistryToken     string        `name:"schema-registry-token" help:"bearer token sent to the registry instead of basic auth" to:"Relay.Publish.Record.Registry.Token" secret:""`
	SchemaRegistryCaFile    string        `name:"schema-registry-ca-file" help:"PEM CA bundle that signed the registry's certificate (default: system roots)" to:"RegistryTLS.CAFile"`
	SchemaRegistryCertFile  string        `name:"schema-registry-cert-file" help:"PEM client certificate for a registry that asks for one" to:"RegistryTLS.CertFile"`
	SchemaRegistryKeyFile   string        `name:"schema-registry-key-file" help:"PEM private key (unencrypted) of --schema-registry-cert-file" to:"RegistryTLS.KeyFile"`
	SchemaRegistryTimeout   time.Duration `name:"schema-registry-timeout" help:"how long one registry request may take; a registry that does not answer holds the stream (slot position kept), it never dead-letters" to:"Relay.Publish.Record.Registry.Timeout"`
	SchemaRegistryCacheSize int           `name:"schema-registry-cache-size" help:"most schemas remembered (by id, and by subject and version); what is remembered keeps being served while the registry is down" to:"Relay.Publish.Record.Registry.CacheSize"`
	SchemaRegistryLatestTtl time.Duration `name:"schema-registry-latest-ttl" help:"with --schema-version latest: how long a subject's latest version is trusted before it is asked again" to:"Relay.Publish.Record.Registry.LatestTTL"`
	SchemaSubjectStrategy   string        `name:"schema-subject-strategy" help:"the subject of an event's value schema: topic (<topic>-value), record (<event_type>; with protobuf also the message's full name) or topic-record (<topic>-<event_type>)" to:"Relay.Publish.Record.SubjectStrategy"`
	SchemaVersion           string        `name:"schema-version" help:"which version of the subject encodes an event: row (its schema_version column; an unregistered version is poison) or latest" to:"Relay.Publish.Record.SchemaVersion"`
	SchemaKey               bool          `name:"schema-key" help:"frame the record key too, as Confluent's serializers write keys: the aggregate_id as the format's string (Avro \"string\", JSON Schema {\"type\":\"string\"}) with the id of the latest schema of <topic>-key; the partition stays murmur2 of the aggregate_id; avro and json-schema only" to:"Relay.Publish.Record.KeySchema"`
}

// DeliveryFlags are the delivery guarantee's: the streaming commands'
// (run, recover), and doctor's, which checks what exactly-once needs. The
// other commands that publish (replay, dlq) always write at-least-once.
type DeliveryFlags struct {
	Delivery            string        `name:"delivery" help:"delivery guarantee into Kafka: at-least-once (consumers deduplicate, as inbox does) or exactly-once (Kafka transactions with the source position: read_committed consumers see each event once; docs/exactly-once.md)" to:"Relay.Publish.Delivery"`
	TransactionInterval time.Duration `name:"transaction-interval" help:"with --delivery exactly-once: how long a Kafka transaction collects events before it commits; the next commits as soon as the previous one returned once it is this old, so the default is group commit (raise it for fewer, larger commits and more latency)" to:"Relay.Publish.TransactionInterval"`
	TransactionTimeout  time.Duration `name:"transaction-timeout" help:"with --delivery exactly-once: the transaction.timeout.ms asked for; the coordinator aborts a transaction a dead relay left open this long (at most the brokers' transaction.max.timeout.ms)" to:"Relay.Publish.TransactionTimeout"`
	TransactionalId     string        `name:"transactional-id" help:"with --delivery exactly-once: the transactional id, the same on every replica of the slot so a new leader fences the old (default: outbox-relay-<system identifier>-<database>-<slot>, so relays of different databases never share it)" to:"Relay.Publish.TransactionalID"`
}

// RunFlags are the streaming commands' (run, recover): probes, limits, leadership, checkpoints, cleanup, statistics and tracing.
type RunFlags struct {
	MetricsAddr             string        `name:"metrics-addr" help:"address serving /metrics; empty disables" default:"127.0.0.1:9187" to:"MetricsAddr" optional:""`
	HeartbeatInterval       time.Duration `name:"heartbeat-interval" help:"cadence of WAL heartbeats that let an idle outbox advance the slot; 0 disables" to:"Relay.Database.HeartbeatInterval"`
	StatusInterval          time.Duration `name:"status-interval" help:"cadence of standby status updates; keep well under wal_sender_timeout" to:"Relay.Database.StatusInterval"`
	ShutdownTimeout         time.Duration `name:"shutdown-timeout" help:"how long SIGTERM waits for in-flight events to be acknowledged" to:"Relay.ShutdownTimeout"`
	MaxInflightEvents       int           `name:"max-inflight-events" help:"most unacknowledged events held in memory" to:"Relay.Window.MaxEvents"`
	MaxInflightBytes        int64         `name:"max-inflight-bytes" help:"most unacknowledged bytes held in memory, e.g. 16MiB" to:"Relay.Window.MaxBytes" type:"size"`
	PoisonPolicy            string        `name:"poison-policy" help:"poison events: quarantine (dead-letter it, park its aggregate) or halt (stop, slot position held)" to:"Relay.Publish.PoisonPolicy"`
	SlotCheckInterval       time.Duration `name:"slot-check-interval" help:"how often the running relay checks the slot's health (wal_status)" to:"Relay.Database.SlotCheckInterval"`
	StallTimeout            time.Duration `name:"stall-timeout" help:"events in flight with no acknowledgement for this long is a stall: logged, outbox_relay_stalled=1, /readyz 503; 0 disables" to:"Relay.Window.StallTimeout"`
	MaxProcs                int           `name:"max-procs" default:"${max_procs}" help:"most OS threads running Go code at once (GOMAXPROCS); 1 suits the single replication stream best (docs/benchmarks.md); 0 keeps the Go runtime's choice, which is the default when GOMAXPROCS is set" to:"MaxProcs"`
	Pprof                   bool          `name:"pprof" help:"also serve Go's /debug/pprof/ profiles, on --pprof-addr" to:"PProf"`
	PprofAddr               string        `name:"pprof-addr" help:"with --pprof: the loopback address (host:port) of the profiles, a listener of their own, never --metrics-addr's" default:"127.0.0.1:6060" to:"PProfAddr"`
	CheckpointInterval      time.Duration `name:"checkpoint-interval" help:"cadence of checkpoint saves (acknowledged position, for skip-ahead, recover and replay); 0 disables" to:"Relay.Checkpoints.Interval"`
	CheckpointRetention     time.Duration `name:"checkpoint-retention" help:"how long checkpoint history is kept (bounds replay --from-lsn/--since); keep it at least the outbox retention; 0 keeps it all" to:"Relay.Checkpoints.Retention"`
	CleanupOlderThan        time.Duration `name:"cleanup-older-than" help:"while leader, delete confirmed outbox rows older than this every --cleanup-interval (0: off; see outbox-relay cleanup)" to:"Relay.Cleanup.OlderThan"`
	CleanupInterval         time.Duration `name:"cleanup-interval" help:"cadence of the leader's cleanup runs (each bounded by half of it)" to:"Relay.Cleanup.Interval"`
	LeaderPollInterval      time.Duration `name:"leader-poll-interval" help:"how often a standby tries to take the leader lock; bounds the takeover after a leader stops" to:"Relay.Leader.PollInterval" rule:"Leader"`
	LeaderKeepaliveInterval time.Duration `name:"leader-keepalive-interval" help:"how often the leader checks its lock connection" to:"Relay.Leader.KeepaliveInterval" rule:"Leader"`
	LeaderTimeout           time.Duration `name:"leader-timeout" help:"a leader unable to confirm its lock for half of this stops streaming; PostgreSQL frees the lock of a session silent this long" to:"Relay.Leader.Timeout" rule:"Leader"`
	WalSenderTimeout        time.Duration `name:"wal-sender-timeout" help:"wal_sender_timeout of the relay's replication session: how long the server keeps a silent relay's slot busy; 0 keeps the server's setting" to:"Relay.Database.WALSenderTimeout"`
	StatsInterval           time.Duration `name:"stats-interval" help:"cadence of the PostgreSQL statistics metrics (slot lag, retained WAL, exhaustion forecast, outbox table size); 0 disables" to:"Relay.Stats.Interval"`
	WalDiskBudget           int64         `name:"wal-disk-budget" help:"bytes of WAL the slot may retain on the server's disk, a target for the exhaustion forecast besides safe_wal_size, e.g. 50GB; 0: none" to:"Relay.Stats.WALDiskBudget" type:"size"`
	TracePublish            bool          `name:"trace-publish" help:"emit one OpenTelemetry span per event, \"publish <topic>\", from hand-off to Kafka's acknowledgement, as a child of the producer's traceparent header, to --otlp-endpoint; recorded only when the producer's trace is sampled unless OTEL_TRACES_SAMPLER says otherwise (docs/tracing.md)" to:"Trace.Publish"`
	OtlpEndpoint            string        `name:"otlp-endpoint" help:"OTLP/HTTP endpoint of --trace-publish's spans, e.g. http://127.0.0.1:4318 (/v1/traces is added to a URL without a path); wins over OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, used when it is unset; headers, TLS, timeout, compression from the other OTEL_EXPORTER_OTLP_* variables, service.name from OTEL_SERVICE_NAME (docs/tracing.md)" to:"Trace.Endpoint"`
	FailoverSlot            bool          `name:"failover-slot" help:"${failover_help}; applies when the relay creates a missing slot (an existing slot keeps its flag: migrate --failover-slot changes it)" to:"Relay.Database.NoFailoverSlot" negate:""`
}

// MigrateFlags are migrate's own: the role it grants and the table it creates.
type MigrateFlags struct {
	GrantRole       string `name:"grant-role" help:"create (if missing) a role for 'run' and grant it REPLICATION and exactly the table privileges the relay needs (e.g. outbox_relay)" to:"GrantRole"`
	GrantCleanup    bool   `name:"grant-cleanup" help:"with --grant-role: also grant DELETE on the outbox, for run --cleanup-older-than" to:"GrantCleanup"`
	PayloadType     string `name:"payload-type" help:"payload column type of a table migrate creates: jsonb or bytea" default:"jsonb" to:"PayloadType"`
	FailoverSlot    bool   `name:"failover-slot" help:"${failover_help}; set explicitly, migrate also sets an existing slot's flag to it (stop the relay first)" to:"Relay.Database.NoFailoverSlot" negate:""`
	NullablePayload bool   `name:"nullable-payload" help:"create the table's payload column without NOT NULL, so a row with a NULL payload can stand for a tombstone (run --tombstone-on-null-payload)" to:"NullablePayload"`
}

// CreateFailoverFlags is slot create's --failover-slot.
type CreateFailoverFlags struct {
	FailoverSlot bool `name:"failover-slot" help:"${failover_help}" to:"Relay.Database.NoFailoverSlot" negate:""`
}

// StandbyFlags are the flags of the commands that use the slot (migrate,
// run, recover, slot, checkpoint): the hot standby it lives on when the
// relay decodes there.
type StandbyFlags struct {
	ReplicationURL string `name:"replication-url" help:"a hot standby of --database-url's server (PostgreSQL 16+) to decode from, as a URL like --database-url: the replication stream and the slot live there, so the primary runs no logical walsender; everything the relay writes stays on --database-url (docs/high-availability.md). Empty: decode on the primary" to:"Relay.Database.ReplicationURL" secret:"dsn"`
}
