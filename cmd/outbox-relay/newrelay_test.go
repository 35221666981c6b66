package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

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
	r, err := newRelay(cfg, slog.New(zerolog.NewSlogHandler(zerolog.New(&buf))))
	if err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != 1 {
		t.Errorf("GOMAXPROCS %d after --max-procs 1", got)
	}
	// The cleanup schedule registers its collectors when it is on.
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if body, _ := io.ReadAll(rec.Body); !strings.Contains(string(body), "outbox_relay_cleanup_runs_total") {
		t.Errorf("no cleanup schedule: /metrics lacks outbox_relay_cleanup_runs_total")
	}
	for _, want := range []string{`"gomaxprocs":1`, "Go scheduler", "kafka connection security", "--kafka-tls-insecure-skip-verify", "sslmode=verify-full"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("set-up log lacks %q:\n%s", want, buf.String())
		}
	}
}
