package reconcile

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

func TestFirstOffset(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		offsets map[int64]time.Time
		want    int64
	}{
		{nil, -1},
		{map[int64]time.Time{-1: now}, -1},
		{map[int64]time.Time{7: now}, 7},
		{map[int64]time.Time{9: now, 4: now, -1: now}, 4},
	} {
		if got := firstOffset(tc.offsets); got != tc.want {
			t.Errorf("firstOffset(%v) = %d, want %d", tc.offsets, got, tc.want)
		}
	}
}

func TestOffsetRequests(t *testing.T) {
	at := time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	byTime := offsetRequests("t", []int{0, 2}, at)["t"]
	if len(byTime) != 2 || byTime[1].Partition != 2 || byTime[1].Timestamp != at.UnixMilli() {
		t.Errorf("by time: %+v", byTime)
	}
	last := offsetRequests("t", []int{1}, time.Time{})["t"]
	if len(last) != 1 || last[0] != kafka.LastOffsetOf(1) {
		t.Errorf("end: %+v", last)
	}
}

func TestEventIDOf(t *testing.T) {
	id := uuid.New()
	for _, tc := range []struct {
		name    string
		headers []kafka.Header
		ok      bool
	}{
		{"none", nil, false},
		{"valid", []kafka.Header{{Key: "event_type", Value: []byte("x")}, {Key: "event_id", Value: []byte(id.String())}}, true},
		{"invalid", []kafka.Header{{Key: "event_id", Value: []byte("nope")}}, false},
		{"first wins", []kafka.Header{{Key: "event_id", Value: []byte("nope")}, {Key: "event_id", Value: []byte(id.String())}}, false},
	} {
		got, ok := eventIDOf(kafka.Message{Headers: tc.headers})
		if ok != tc.ok || ok && got != id {
			t.Errorf("%s: %v %v", tc.name, got, ok)
		}
	}
	// Every record format of the relay.
	ev := &replication.WALEvent{
		Row: record.Row{EventID: id.String(), AggregateType: "a", AggregateID: "k", AggregateVersion: "1", EventType: "e", SchemaVersion: "1", Payload: []byte("{}")},
	}
	for _, rc := range []record.Config{{}, {Format: record.FormatDebezium},
		{Format: record.FormatCloudEvents, CloudEventsSource: "/s"},
		{Format: record.FormatCloudEvents, CloudEventsSource: "/s", CloudEventsMode: record.CloudEventsStructured}} {
		m, err := rc.Encode("t", &ev.Row)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := eventIDOf(m); !ok || got != id {
			t.Errorf("%+v: %v %v", rc, got, ok)
		}
	}
}

// TestEventIDOfRegistryFormats: the registry formats' records carry the
// native headers, so reconcile reads their event ids without a registry
// (the framed value is never decoded), and so it does for a value whose
// schema id no registry has (issue 48).
func TestEventIDOfRegistryFormats(t *testing.T) {
	id := uuid.New()
	row := record.Row{EventID: id.String(), AggregateType: "a", AggregateID: "k", AggregateVersion: "1", EventType: "shop.E", SchemaVersion: "1",
		Payload: []byte(`{"id":"x"}`)}
	for _, c := range []struct {
		format     record.Format
		schemaType string
		text       string
	}{
		{record.FormatAvro, "", `{"type":"record","name":"E","namespace":"shop","fields":[{"name":"id","type":"string"}]}`},
		{record.FormatProtobuf, record.SchemaTypeProtobuf, `syntax = "proto3"; package shop; message E { string id = 1; }`},
		{record.FormatJSONSchema, record.SchemaTypeJSON, `{"type":"object"}`},
	} {
		s, err := record.ParseSchema(t.Context(), 77, c.schemaType, c.text, nil)
		if err != nil {
			t.Fatal(err)
		}
		enc, err := record.NewEncoder(record.Config{Format: c.format})
		if err != nil {
			t.Fatal(err)
		}
		m, err := enc.EncodeRegistered("t", &row, record.SchemaRef{Subject: "t-value", Version: "1"}, s)
		if err != nil {
			t.Fatal(err)
		}
		if m.Value[0] != 0 {
			t.Fatalf("%s: value %x is not framed", c.format, m.Value)
		}
		if got, ok := eventIDOf(m); !ok || got != id {
			t.Errorf("%s: %v %v", c.format, got, ok)
		}
	}
}
