package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
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
