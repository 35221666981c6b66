package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestStatsFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	cfg, err := parse("run", "", nil, scopeDB|scopeKafka|scopeRun, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if st := cfg.Relay.Stats; st.Interval != 15*time.Second || st.WALDiskBudget != 0 {
		t.Fatalf("defaults: interval %s budget %d", st.Interval, st.WALDiskBudget)
	}
	t.Setenv("OUTBOX_RELAY_STATS_INTERVAL", "0")
	t.Setenv("OUTBOX_RELAY_WAL_DISK_BUDGET", "1073741824")
	if cfg, err = parse("run", "", nil, scopeDB|scopeKafka|scopeRun, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// 0 turns the statistics off: relay.Config's -1.
	if st := cfg.Relay.Stats; st.Interval != -1 || st.WALDiskBudget != 1<<30 {
		t.Fatalf("from env: interval %s budget %d", st.Interval, st.WALDiskBudget)
	}

	_, err = parse("run", "", []string{"--stats-interval", "-1s", "--wal-disk-budget", "-5"}, scopeDB|scopeKafka|scopeRun, &bytes.Buffer{})
	if _, ok := err.(configError); !ok {
		t.Fatalf("invalid stats flags: got %v, want a configError (exit 2)", err)
	}
	for _, want := range []string{"--stats-interval -1s: use 0 (off)", "--wal-disk-budget -5: use 0 (none)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}
