package inbox

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"
)

// Header names the relay sets on every record (see the publisher package).
const (
	headerEventID          = "event_id"
	headerEventType        = "event_type"
	headerSchemaVersion    = "schema_version"
	headerAggregateType    = "aggregate_type"
	headerAggregateVersion = "aggregate_version"
)

// Event is one outbox event as a consumer sees it: the relay's record
// decoded back into the outbox row's fields, plus where it was read from.
type Event struct {
	ID               string // event_id, a UUID
	AggregateType    string
	AggregateID      string // the record key
	AggregateVersion int64
	EventType        string
	SchemaVersion    int
	Payload          []byte            // the record value
	Headers          map[string]string // the outbox row's own headers (the standard ones are fields above)

	Topic     string
	Partition int
	Offset    int64
	Time      time.Time // record timestamp: the outbox transaction's commit time
}

// DecodeError is a record that is not an outbox event (a missing or
// malformed standard header). Redelivering it cannot fix it, so it is
// dead-lettered like a permanent handler failure.
type DecodeError struct {
	Topic     string
	Partition int
	Offset    int64
	Reason    string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("record %s/%d@%d is not an outbox event: %s", e.Topic, e.Partition, e.Offset, e.Reason)
}

// Decode maps a record written by outbox-relay back to an Event. The first
// occurrence of each standard header wins (the relay writes them first).
func Decode(m kafka.Message) (Event, error) {
	ev := Event{
		AggregateID: string(m.Key),
		Payload:     m.Value,
		Topic:       m.Topic,
		Partition:   m.Partition,
		Offset:      m.Offset,
		Time:        m.Time,
	}
	fail := func(reason string) (Event, error) {
		return ev, &DecodeError{Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Reason: reason}
	}
	var version, schema string
	var seen [5]bool
	for _, h := range m.Headers {
		slot := -1
		switch h.Key {
		case headerEventID:
			slot = 0
		case headerEventType:
			slot = 1
		case headerSchemaVersion:
			slot = 2
		case headerAggregateType:
			slot = 3
		case headerAggregateVersion:
			slot = 4
		}
		if slot < 0 {
			if ev.Headers == nil {
				ev.Headers = make(map[string]string, 2)
			}
			ev.Headers[h.Key] = string(h.Value)
			continue
		}
		if seen[slot] {
			continue
		}
		seen[slot] = true
		switch slot {
		case 0:
			ev.ID = string(h.Value)
		case 1:
			ev.EventType = string(h.Value)
		case 2:
			schema = string(h.Value)
		case 3:
			ev.AggregateType = string(h.Value)
		case 4:
			version = string(h.Value)
		}
	}
	if ev.ID == "" {
		return fail("no event_id header")
	}
	id, err := uuid.Parse(ev.ID)
	if err != nil {
		return fail(fmt.Sprintf("event_id %q is not a UUID", ev.ID))
	}
	ev.ID = id.String()
	if ev.AggregateID == "" {
		return fail("empty key (aggregate_id)")
	}
	if ev.AggregateType == "" || ev.EventType == "" {
		return fail("missing aggregate_type or event_type header")
	}
	if ev.AggregateVersion, err = strconv.ParseInt(version, 10, 64); err != nil {
		return fail(fmt.Sprintf("aggregate_version %q is not an integer", version))
	}
	if n, err := strconv.Atoi(schema); err != nil {
		return fail(fmt.Sprintf("schema_version %q is not an integer", schema))
	} else {
		ev.SchemaVersion = n
	}
	return ev, nil
}

// recordNamespace derives stable ids for records that have no usable
// event_id, so that their redeliveries land on the same dead-letter row.
var recordNamespace = uuid.MustParse("6f1c1f0e-6a53-4c1e-9a43-3f0c2d0a7e11")

// recordID is a deterministic UUID for the record at topic/partition/offset.
func recordID(topic string, partition int, offset int64) string {
	return uuid.NewSHA1(recordNamespace, []byte(topic+"/"+strconv.Itoa(partition)+"/"+strconv.FormatInt(offset, 10))).String()
}

// isDecodeError reports whether err is a DecodeError.
func isDecodeError(err error) bool {
	var de *DecodeError
	return errors.As(err, &de)
}
