package main

import (
	"bytes"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/process"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
)

func TestMaxProcs(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	parseRun := func(args ...string) (*config.Config, error) {
		return parse("run", args, &bytes.Buffer{})
	}

	// GOMAXPROCS may be set by whoever runs the tests; both cases are
	// checked with it unset and set.
	if v, ok := os.LookupEnv("GOMAXPROCS"); ok {
		t.Cleanup(func() { os.Setenv("GOMAXPROCS", v) })
	}
	os.Unsetenv("GOMAXPROCS")
	cfg, err := parseRun()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxProcs != 1 {
		t.Fatalf("default --max-procs %d, want 1", cfg.MaxProcs)
	}
	t.Setenv("GOMAXPROCS", "3")
	if cfg, err = parseRun(); err != nil || cfg.MaxProcs != 0 {
		t.Fatalf("with GOMAXPROCS set: --max-procs %d (%v), want 0 (GOMAXPROCS wins)", cfg.MaxProcs, err)
	}
	if cfg, err = parseRun("--max-procs", "2"); err != nil || cfg.MaxProcs != 2 {
		t.Fatalf("explicit --max-procs 2: %d (%v)", cfg.MaxProcs, err)
	}
	for _, n := range []string{"-1", "1025", "100000"} {
		// 100000 was accepted and ended the process with "thread
		// exhaustion" (issue 36, row 4).
		if _, err := parseRun("--max-procs", n); err == nil || !strings.Contains(err.Error(), "--max-procs "+n+": use 1") {
			t.Fatalf("--max-procs %s: %v", n, err)
		}
	}
	if _, err := parseRun("--max-procs", "1024"); err != nil {
		t.Fatalf("--max-procs 1024: %v", err)
	}

	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	if got := process.ApplyMaxProcs(1); got != 1 {
		t.Fatalf("process.ApplyMaxProcs(1) = %d", got)
	}
	if got := process.ApplyMaxProcs(0); got != 1 {
		t.Fatalf("process.ApplyMaxProcs(0) changed GOMAXPROCS to %d", got)
	}
}
