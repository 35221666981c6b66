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
	var parsed bytes.Buffer
	cfg, err := parse("recover", []string{"--max-procs", "1", "--cleanup-older-than", "168h", "--cleanup-interval", "1m",
		"--kafka-tls-insecure-skip-verify"}, &parsed)
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
	for _, want := range []string{`"gomaxprocs":1`, "Go scheduler"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("set-up log lacks %q:\n%s", want, buf.String())
		}
	}
	// The warnings come from parsing, as for every command that connects.
	for _, want := range []string{"kafka connection security", "--kafka-tls-insecure-skip-verify", "sslmode=verify-full"} {
		if !strings.Contains(parsed.String(), want) {
			t.Errorf("parse log lacks %q:\n%s", want, parsed.String())
		}
	}
}

// TestEveryConnectingCommandWarns: the insecure-setting warnings come from
// parsing, which every command that connects goes through first (not only
// run: issue 36, row 6, replay --kafka-tls-insecure-skip-verify warned
// nothing), and a host from PGHOST is not taken for loopback.
func TestEveryConnectingCommandWarns(t *testing.T) {
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_*
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@db.example:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	for _, name := range []string{"replay", "dlq retry", "doctor", "reconcile"} {
		var errOut bytes.Buffer
		if _, err := parse(name, []string{"--kafka-tls-insecure-skip-verify"}, &errOut); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"--kafka-tls-insecure-skip-verify: broker certificates are not verified", "does not verify the server's certificate"} {
			if !strings.Contains(errOut.String(), want) {
				t.Errorf("%s: no warning %q:\n%s", name, want, errOut.String())
			}
		}
	}
	t.Setenv("PGHOST", "db.example")
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@/db?sslmode=require")
	var errOut bytes.Buffer
	if _, err := parse("dlq list", nil, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "does not verify the server's certificate") {
		t.Errorf("a remote host from PGHOST taken for loopback:\n%s", errOut.String())
	}
	t.Setenv("PGHOST", "/var/run/postgresql")
	errOut.Reset()
	if _, err := parse("dlq list", nil, &errOut); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(errOut.String(), "does not verify the server's certificate") {
		t.Errorf("a local socket from PGHOST warned about:\n%s", errOut.String())
	}
}

// TestStandbyURLWarns: the standby the relay decodes from
// (--replication-url) gets the same certificate warning as the primary,
// naming its own flag; a verified one gets none.
func TestStandbyURLWarns(t *testing.T) {
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_*
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@db.example:5432/db?sslmode=verify-full")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_REPLICATION_URL", "postgres://u@standby.example:5432/db?sslmode=require")
	var errOut bytes.Buffer
	if _, err := parse("run", nil, &errOut); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "does not verify the server's certificate: use sslmode=verify-full (with sslrootcert=CA file) in --replication-url") ||
		strings.Contains(errOut.String(), "in --database-url") {
		t.Errorf("want the warning for --replication-url only:\n%s", errOut.String())
	}
	t.Setenv("OUTBOX_RELAY_REPLICATION_URL", "postgres://u@standby.example:5432/db?sslmode=verify-full")
	errOut.Reset()
	if _, err := parse("run", nil, &errOut); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(errOut.String(), "does not verify the server's certificate") {
		t.Errorf("a verified standby warned about:\n%s", errOut.String())
	}
}
