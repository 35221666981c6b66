package main

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func parsedRun(t *testing.T) *config.Config {
	t.Helper()
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	cfg, err := parse("run", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestFlagTextNamesFlags: library text naming relay.Config fields reads in
// flag terms, longest path first, Kafka's TLS and SASL included; a command
// without a field's flag names run's.
func TestFlagTextNamesFlags(t *testing.T) {
	cfg := parsedRun(t)
	for in, want := range map[string]string{
		"record of 2000000 bytes exceeds Publish.MaxBatchBytes 921600": "record of 2000000 bytes exceeds --max-batch-bytes 921600",
		"raise Publish.MaxBatch, or Window.MaxBytes":                   "raise --max-batch, or --max-inflight-bytes",
		"longer than Leader.Timeout; restart with Database.Table x.y":  "longer than --leader-timeout; restart with --table x.y",
		"set Kafka.TLS.RootCAs to the PEM CA bundle":                   "set --kafka-tls-ca-file to the PEM CA bundle",
		"set Kafka.TLS (and Kafka.TLS.RootCAs unless ...)":             "set --kafka-tls (and --kafka-tls-ca-file unless ...)",
		"set Kafka.TLS.Certificates to a certificate":                  "set --kafka-tls-cert-file and --kafka-tls-key-file to a certificate",
		"drop Kafka.SASL or point Kafka.Brokers at a SASL listener": "drop --kafka-sasl-mechanism, --kafka-sasl-username and --kafka-sasl-password " +
			"or point --kafka-brokers at a SASL listener",
		"check Kafka.SASL.Username and its password (Kafka.SASL.Password)": "check --kafka-sasl-username and its password (--kafka-sasl-password)",
		"no Database.NoFailoverSlot here; ShutdownTimeout":                 "no --failover-slot=false here; --shutdown-timeout",
		"Leader and Leaders stay":                                          "Leader and Leaders stay",
	} {
		if got := cfg.FlagText(in); got != want {
			t.Errorf("%q:\n got %q\nwant %q", in, got, want)
		}
	}
	// cleanup has no --checkpoint-interval: the relay's setting is run's.
	t.Setenv("OUTBOX_RELAY_OLDER_THAN", "1h")
	cfg, err := parse("cleanup", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.FlagText("checkpoints on by Checkpoints.Interval; Options.OlderThan 0"); got != "checkpoints on by --checkpoint-interval; --older-than 0" {
		t.Errorf("cleanup: %q", got)
	}
}

// TestLogRecordsNameFlags: the libraries' log records keep their text
// (an embedder's logs and the binary's read alike) and carry the fields it
// names, in the message and in string, error and grouped attributes, with
// their flags.
func TestLogRecordsNameFlags(t *testing.T) {
	cfg := parsedRun(t)
	var out bytes.Buffer
	log := newLogger(cfg, &out).With(slog.String("hint", "see Window.StallTimeout"))
	log.WithGroup("g").Warn("no acknowledgement for Window.StallTimeout", slog.String("reason", "exceeds Publish.MaxBatchBytes 1"),
		slog.Any("error", errors.New("fix: set Kafka.TLS.ServerName")), slog.Group("grp", slog.String("x", "Leader.Timeout")),
		slog.Int("n", 3))
	got := out.String()
	for _, want := range []string{`"message":"no acknowledgement for Window.StallTimeout"`, `"see Window.StallTimeout"`,
		`"g.reason":"exceeds Publish.MaxBatchBytes 1"`, `"g.error":"fix: set Kafka.TLS.ServerName"`, `"g.grp.x":"Leader.Timeout"`, `"g.n":3`,
		`"g.flags.Window.StallTimeout":"--stall-timeout"`, `"g.flags.Publish.MaxBatchBytes":"--max-batch-bytes"`,
		`"g.flags.Kafka.TLS.ServerName":"--kafka-tls-server-name"`, `"g.flags.Leader.Timeout":"--leader-timeout"`} {
		if !strings.Contains(got, want) {
			t.Errorf("log lacks %s:\n%s", want, got)
		}
	}
}

// TestMigrateGrantsNameFlags: the grant migrate prints for the cleanup
// schedule names run's flag, although migrate has no such flag.
func TestMigrateGrantsNameFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	cfg, err := parse("migrate", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	grants := migrations.RuntimeGrants(cfg.Table(), "db", migrations.GrantOptions{Cleanup: true})
	why := cfg.Text(grants[len(grants)-1].Why)
	if !strings.Contains(why, "(--cleanup-older-than) deletes rows Kafka has acknowledged") {
		t.Fatalf("cleanup grant: %q", why)
	}
}
