package inbox

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/record"
)

// parseRecordFormat validates Config.RecordFormat: a record format, or ""
// and "auto", which detect the format of each record ("").
func parseRecordFormat(f record.Format) (record.Format, error) {
	switch f {
	case "auto":
		return "", nil
	case "", record.FormatNative, record.FormatDebezium, record.FormatCloudEvents,
		record.FormatAvro, record.FormatProtobuf, record.FormatJSONSchema:
		return f, nil
	}
	return "", fmt.Errorf("record format %q: use native, debezium, cloudevents, avro, protobuf, json-schema or auto", f)
}

// recordNamespace derives stable ids for records that have no usable
// event_id, so that their redeliveries land on the same dead-letter row.
var recordNamespace = uuid.MustParse("6f1c1f0e-6a53-4c1e-9a43-3f0c2d0a7e11")

// recordID is a deterministic UUID for the record at topic/partition/offset.
func recordID(topic string, partition int, offset int64) string {
	return uuid.NewSHA1(recordNamespace, []byte(topic+"/"+strconv.Itoa(partition)+"/"+strconv.FormatInt(offset, 10))).String()
}

// isDecodeError reports whether err is a record.DecodeError.
func isDecodeError(err error) bool {
	var de *record.DecodeError
	return errors.As(err, &de)
}
