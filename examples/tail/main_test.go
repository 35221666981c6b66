package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
)

func TestFormatRecord(t *testing.T) {
	m := kafka.Message{
		Topic: "outbox.event.order", Partition: 3, Offset: 17,
		Key:  []byte("ord-1"),
		Time: time.Date(2025, 1, 2, 3, 4, 5, 678900000, time.UTC),
		Headers: []kafka.Header{
			{Key: "event_type", Value: []byte("order.confirmed")},
			{Key: "note", Value: []byte("two words")},
		},
		Value: []byte(`{"order_id":"ord-1","customer_id":"cust-0042","status":"confirmed","version":2}`),
	}
	got := formatRecord(m)
	want := `outbox.event.order p=3 off=17 key=ord-1 ts=2025-01-02T03:04:05.678Z ` +
		`headers=[event_type=order.confirmed note="two words"] ` +
		`value={"order_id":"ord-1","customer_id":"cust-0042","status":"conf…`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTruncate(t *testing.T) {
	if got := truncate([]byte("short\nline"), 60); got != `short\nline` {
		t.Errorf("got %q", got)
	}
	if got := truncate([]byte(strings.Repeat("é", 70)), 60); got != strings.Repeat("é", 60)+"…" {
		t.Errorf("rune truncation: %q", got)
	}
	if got := truncate([]byte{0xff, 0x00}, 60); got != `"\xff\x00"` {
		t.Errorf("binary: %q", got)
	}
	if got := printable(nil); got != `""` {
		t.Errorf("empty key: %q", got)
	}
}

func TestParseFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.brokers, ",") != "127.0.0.1:19092" || cfg.topic != "outbox.event.order" ||
		cfg.duration != 10*time.Second || cfg.fromBeginning {
		t.Fatalf("defaults = %+v", cfg)
	}
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:1, b:2")
	cfg, err = parseFlags([]string{"--from-beginning", "--duration=8s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(cfg.brokers, ",") != "a:1,b:2" || !cfg.fromBeginning || cfg.duration != 8*time.Second {
		t.Fatalf("cfg = %+v", cfg)
	}
	if _, err := parseFlags([]string{"--duration=0s"}, io.Discard); err == nil {
		t.Fatal("zero duration accepted")
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got, err := parseSince("90s", now); err != nil || !got.Equal(now.Add(-90*time.Second)) {
		t.Errorf("90s: %v, %v", got, err)
	}
	if got, err := parseSince("2026-01-02T03:00:00.5Z", now); err != nil || !got.Equal(time.Date(2026, 1, 2, 3, 0, 0, 5e8, time.UTC)) {
		t.Errorf("RFC 3339: %v, %v", got, err)
	}
	for _, bad := range []string{"-1m", "yesterday", "2026-01-02"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("--since %q accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"--since=1m", "--from-beginning"}, io.Discard); err == nil {
		t.Error("--since with --from-beginning accepted")
	}
	if _, err := parseFlags([]string{"--max-records=-1"}, io.Discard); err == nil {
		t.Error("negative --max-records accepted")
	}
	if cfg, err := parseFlags([]string{"--max-records=20", "--since=2026-01-02T03:00:00Z"}, io.Discard); err != nil ||
		cfg.maxRecords != 20 || startName(cfg) != "2026-01-02T03:00:00Z" {
		t.Errorf("--max-records 20 --since: %+v, %v", cfg, err)
	}
}

// schemas is a registry of parsed schemas by id, for the decoder.
type schemas map[uint32]*record.Schema

func (s schemas) Parsed(_ context.Context, id uint32) (*record.Schema, error) {
	if sc, ok := s[id]; ok {
		return sc, nil
	}
	return nil, fmt.Errorf("schema id %d: %w", id, record.ErrSchemaNotFound)
}

// TestDecoderFormat: a framed Avro value is printed whole as the JSON of
// its payload after its schema id, a value that is not framed as without
// a registry, and one whose schema the registry does not have with the
// reason, counted as failed by the caller.
func TestDecoderFormat(t *testing.T) {
	ctx := context.Background()
	s, err := record.ParseSchema(ctx, 5, record.SchemaTypeAvro, `{"type":"record","name":"Order","fields":[
		{"name":"order_id","type":"string"},{"name":"amount_cents","type":"long"},
		{"name":"confirmed_at","type":{"type":"long","logicalType":"timestamp-micros"}}]}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	value, err := s.AppendValue(nil, []byte(`{"order_id":"ord-1","amount_cents":4990,"confirmed_at":"2026-01-02T03:04:05.000006Z"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	d := &decoder{reg: schemas{5: s}}
	m := kafka.Message{Topic: "outbox.avro.order", Partition: 1, Offset: 2, Key: []byte("ord-1"), Value: value,
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Headers: []kafka.Header{{Key: "event_type", Value: []byte("order.confirmed")}}}
	line, ok, framed := d.format(ctx, m)
	want := `outbox.avro.order p=1 off=2 key=ord-1 ts=2026-01-02T03:04:05.000Z headers=[event_type=order.confirmed] ` +
		`schema_id=5 value={"order_id":"ord-1","amount_cents":4990,"confirmed_at":1767323045000006}`
	if line != want || !ok || !framed {
		t.Fatalf("got %q, %t, %t\nwant %q", line, ok, framed, want)
	}
	m.Value = []byte(`{"order_id":"ord-1"}`)
	if line, ok, framed := d.format(ctx, m); line != formatRecord(m) || !ok || framed {
		t.Fatalf("not framed: got %q, %t, %t", line, ok, framed)
	}
	m.Value = append([]byte{0, 0, 0, 0, 9}, value[5:]...)
	if line, ok, framed := d.format(ctx, m); ok || !framed || !strings.Contains(line, `schema_id=9 decode_error="schema id 9: schema not found`) {
		t.Fatalf("unknown id: got %q, %t, %t", line, ok, framed)
	}
}
