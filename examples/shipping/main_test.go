package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("SHIPPING_DATABASE_URL", "")
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:1, b:2")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.databaseURL != "postgres://x/y" || len(cfg.brokers) != 2 || cfg.topics[0] != "outbox.event.order" ||
		cfg.consumer != "shipping" || cfg.group != "shipping" || cfg.schema != "shipping" || cfg.commitInterval != time.Second {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	t.Setenv("SHIPPING_DATABASE_URL", "")
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "")
	_, err := parseFlags([]string{"--policy", "maybe", "--session-timeout", "1s"}, io.Discard)
	for _, want := range []string{"--database-url", "--kafka-brokers", `policy "maybe"`, "--session-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
