package main

import (
	"bytes"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestNewRelaySetsUpLikeRun: the set-up run and recover share warns about
// insecure settings, applies --max-procs and builds the cleanup schedule.
func TestNewRelaySetsUpLikeRun(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@db.example:5432/db?sslmode=require")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	cfg, err := parse("recover", "", []string{"--max-procs", "1", "--cleanup-older-than", "168h", "--cleanup-interval", "1m",
		"--kafka-tls-insecure-skip-verify"}, scopeDB|scopeKafka|scopeRun, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(2)
	var buf bytes.Buffer
	r := newRelay(cfg, slog.New(zerolog.NewSlogHandler(zerolog.New(&buf))))
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS %d after --max-procs 1", got)
	}
	if r.cleanup == nil || r.cleanup.cfg.OlderThan != 168*time.Hour || r.m == nil {
		t.Errorf("cleanup schedule %+v, metrics %v", r.cleanup, r.m)
	}
	for _, want := range []string{`"gomaxprocs":1`, "Go scheduler", "kafka connection security", "--kafka-tls-insecure-skip-verify", "sslmode=verify-full"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("set-up log lacks %q:\n%s", want, buf.String())
		}
	}
}
