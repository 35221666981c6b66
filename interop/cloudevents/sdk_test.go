package cloudevents

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
)

// want is what the SDK must read from one record.
type want struct {
	id, source, typ, subject, aggType, aggVersion, schemaVersion string
	time                                                         time.Time
	contentType                                                  string // "" for a tombstone
	data                                                         []byte // nil for a tombstone
}

// toSDK reads a Kafka record with the SDK's Kafka binding
// (kafka_sarama.NewMessageFromConsumerMessage) into an event.
func toSDK(t *testing.T, cm *sarama.ConsumerMessage) *event.Event {
	t.Helper()
	msg := kafka_sarama.NewMessageFromConsumerMessage(cm)
	if enc := msg.ReadEncoding(); enc != binding.EncodingBinary && enc != binding.EncodingStructured {
		t.Fatalf("the SDK does not see a CloudEvent in %s/%d@%d (encoding %v)", cm.Topic, cm.Partition, cm.Offset, enc)
	}
	ev, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("binding.ToEvent %s/%d@%d: %v", cm.Topic, cm.Partition, cm.Offset, err)
	}
	if err := ev.Validate(); err != nil {
		t.Fatalf("invalid CloudEvent %s/%d@%d: %v", cm.Topic, cm.Partition, cm.Offset, err)
	}
	return ev
}

// check compares every attribute of ev with w. structured says the record
// was in structured mode (the binding then adds no kafka* extensions).
func check(t *testing.T, ev *event.Event, w want, structured bool) {
	t.Helper()
	for _, c := range []struct{ name, got, want string }{
		{"specversion", ev.SpecVersion(), "1.0"},
		{"id", ev.ID(), w.id},
		{"source", ev.Source(), w.source},
		{"type", ev.Type(), w.typ},
		{"subject", ev.Subject(), w.subject},
		{"datacontenttype", ev.DataContentType(), w.contentType},
		{"dataschema", ev.DataSchema(), ""},
	} {
		if c.got != c.want {
			t.Errorf("event %s: %s = %q, want %q", w.id, c.name, c.got, c.want)
		}
	}
	if !ev.Time().Equal(w.time) {
		t.Errorf("event %s: time %s, want %s", w.id, ev.Time().Format(time.RFC3339Nano), w.time.Format(time.RFC3339Nano))
	}
	if !bytes.Equal(ev.Data(), w.data) || (w.data == nil) != (ev.Data() == nil) {
		t.Errorf("event %s: data %q, want %q", w.id, ev.Data(), w.data)
	}
	ext := map[string]string{}
	for k, v := range ev.Extensions() {
		ext[k] = fmt.Sprint(v)
	}
	wantExt := map[string]string{"aggregatetype": w.aggType, "aggregateversion": w.aggVersion, "schemaversion": w.schemaVersion}
	for k, v := range wantExt {
		if ext[k] != v {
			t.Errorf("event %s: extension %s = %q, want %q", w.id, k, ext[k], v)
		}
	}
	for k := range ext {
		// The sarama binding adds kafkatopic, kafkapartition and
		// kafkaoffset to binary mode events.
		if _, ok := wantExt[k]; !ok && !(strings.HasPrefix(k, "kafka") && !structured) {
			t.Errorf("event %s: unexpected extension %s=%q", w.id, k, ext[k])
		}
	}
}

// consumerMessage is m as sarama's consumer delivers it.
func consumerMessage(m kafka.Message) *sarama.ConsumerMessage {
	cm := &sarama.ConsumerMessage{Topic: m.Topic, Partition: int32(m.Partition), Offset: m.Offset, Key: m.Key, Value: m.Value, Timestamp: m.Time}
	for _, h := range m.Headers {
		cm.Headers = append(cm.Headers, &sarama.RecordHeader{Key: []byte(h.Key), Value: h.Value})
	}
	return cm
}

// TestSDKReadsRecords: the SDK's Kafka binding reads the records the
// publisher builds (record.Config.Encode, the relay's own code path) as
// valid CloudEvents with every attribute right: both content modes, JSON
// and binary payloads, row headers, and tombstones.
func TestSDKReadsRecords(t *testing.T) {
	commit := time.Date(2026, 5, 6, 7, 8, 9, 123456000, time.FixedZone("CEST", 2*3600))
	for _, mode := range []record.CloudEventsMode{record.CloudEventsBinary, record.CloudEventsStructured} {
		rc := record.Config{Format: record.FormatCloudEvents, CloudEventsSource: "urn:example:orders",
			CloudEventsMode: mode, TombstoneOnNullPayload: true}
		for _, c := range []struct {
			name        string
			payload     []byte
			contentType string
		}{
			{"json", []byte(`{"total": 12.5, "items": [{"sku": "a\"b", "qty": 2}], "note": "h\u00e9"}`), "application/json"},
			{"confluent-wire-format", []byte{0, 0, 0, 0x30, 0x39, 0x02, 0x06, 'a', 'b', 'c'}, "application/octet-stream"},
			{"tombstone", nil, ""},
		} {
			ev := &record.Row{EventID: "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", AggregateType: "order", AggregateID: "order-42", AggregateVersion: "9000000000", EventType: "order.confirmed", SchemaVersion: "3", Payload: c.payload, CommitTime: commit, Headers: []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)}
			if c.payload == nil {
				ev.Invalid = record.InvalidNullPayload
			}
			m, err := rc.Encode("outbox.event.order", ev)
			if err != nil {
				t.Fatal(err)
			}
			if string(m.Key) != "order-42" {
				t.Fatalf("key %q", m.Key)
			}
			check(t, toSDK(t, consumerMessage(m)), want{
				id: ev.EventID, source: "urn:example:orders", typ: "order.confirmed", subject: "order-42", aggType: "order",
				aggVersion: "9000000000", schemaVersion: "3", time: commit, contentType: c.contentType, data: c.payload,
			}, mode == record.CloudEventsStructured && c.payload != nil)
		}
	}
}
