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
	cfg, err := parse("run", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if st := cfg.Relay.Stats; st.Interval != 15*time.Second || st.WALDiskBudget != 0 {
		t.Fatalf("defaults: interval %s budget %d", st.Interval, st.WALDiskBudget)
	}
	t.Setenv("OUTBOX_RELAY_STATS_INTERVAL", "0")
	t.Setenv("OUTBOX_RELAY_WAL_DISK_BUDGET", "1073741824")
	if cfg, err = parse("run", nil, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// 0 turns the statistics off: relay.Config's -1.
	if st := cfg.Relay.Stats; st.Interval != -1 || st.WALDiskBudget != 1<<30 {
		t.Fatalf("from env: interval %s budget %d", st.Interval, st.WALDiskBudget)
	}

	for _, c := range []struct{ flag, value, want string }{
		{"--stats-interval", "-1s", `--stats-interval "-1s": negative: use 0 or more`},
		{"--wal-disk-budget", "-5", `--wal-disk-budget "-5": negative: use 0 or more`},
	} {
		_, err = parse("run", []string{c.flag, c.value}, &bytes.Buffer{})
		if _, ok := err.(configError); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %s: got %v, want a configError (exit 2) with %q", c.flag, c.value, err, c.want)
		}
	}
}
