package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/poison"
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

// TestParseFlagsPolicy: --policy takes the poison vocabulary, and "wait",
// its earlier name, still means quarantine.
func TestParseFlagsPolicy(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:1")
	for args, want := range map[string]poison.Policy{"": poison.Quarantine, "quarantine": poison.Quarantine, "wait": poison.Quarantine, "halt": poison.Halt} {
		var flags []string
		if args != "" {
			flags = []string{"--policy", args}
		}
		cfg, err := parseFlags(flags, io.Discard)
		if err != nil || cfg.policy != want {
			t.Errorf("--policy %q: %q, %v; want %q", args, cfg.policy, err, want)
		}
	}
}

func TestParseFlagsBatching(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:1")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// 0 leaves each to the library's default.
	if cfg.batchSize != 0 || cfg.batchLinger != 0 || cfg.concurrency != 0 {
		t.Fatalf("batching defaults = %d, %s, %d; want zeros", cfg.batchSize, cfg.batchLinger, cfg.concurrency)
	}
	cfg, err = parseFlags([]string{"--batch-size", "200", "--batch-linger", "10ms", "--concurrency", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.batchSize != 200 || cfg.batchLinger != 10*time.Millisecond || cfg.concurrency != 3 {
		t.Fatalf("batching = %d, %s, %d", cfg.batchSize, cfg.batchLinger, cfg.concurrency)
	}
	for _, args := range [][]string{{"--batch-size", "-1"}, {"--batch-linger", "-1ms"}, {"--concurrency", "-2"}} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "must not be negative") {
			t.Errorf("%v: err = %v, want a negative-value error", args, err)
		}
	}
}

func TestPoolConfig(t *testing.T) {
	for _, tc := range []struct {
		url         string
		concurrency int
		want        int32
	}{
		{"postgres://x/y?pool_max_conns=5", 0, 5},   // the default concurrency is the pool size itself
		{"postgres://x/y?pool_max_conns=5", 6, 8},   // every partition plus two
		{"postgres://x/y?pool_max_conns=20", 6, 20}, // a larger configured pool is kept
	} {
		pcfg, err := poolConfig(tc.url, tc.concurrency)
		if err != nil {
			t.Fatal(err)
		}
		if pcfg.MaxConns != tc.want {
			t.Errorf("%s, concurrency %d: MaxConns %d, want %d", tc.url, tc.concurrency, pcfg.MaxConns, tc.want)
		}
	}
	if _, err := poolConfig("postgres://x/y?pool_max_conns=zero", 0); err == nil || !strings.Contains(err.Error(), "--database-url") {
		t.Errorf("bad URL: err = %v", err)
	}
}
