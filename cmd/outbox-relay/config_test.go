package main

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
)

func TestEnvFallbackAndFlagPrecedence(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092, b:9092")
	t.Setenv("OUTBOX_RELAY_HEARTBEAT_INTERVAL", "3s")
	t.Setenv("OUTBOX_RELAY_SLOT", "from_env")
	cfg, err := parse("run", []string{"--slot", "from_flag"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.Database.Slot != "from_flag" || cfg.Relay.Database.HeartbeatInterval != 3*time.Second || len(cfg.Relay.Kafka.Brokers) != 2 || cfg.Table().String() != "public.outbox" {
		t.Fatalf("config %+v", cfg)
	}
	if cfg.Template().Render("order", "x") != "outbox.event.order" {
		t.Fatal("default topic template")
	}
}

func TestInvalidConfigSaysHowToFix(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_STATUS_INTERVAL", "soon")
	_, err := parse("run", []string{
		"--database-url", "mysql://x", "--kafka-brokers", "nohost", "--topic-template", "t.{oops}",
		"--log-format", "xml", "--slot", "Bad-Name",
	}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	if _, ok := err.(configError); !ok {
		t.Fatalf("error type %T", err)
	}
	for _, want := range []string{
		"OUTBOX_RELAY_STATUS_INTERVAL=\"soon\": not a duration", "postgres:// URL", `"nohost" is not host:port`,
		"unknown placeholder {oops}", "use json or console", `--slot "Bad-Name"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestMissingRequiredConfig(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "") // set when the stack's env is
	_, err := parse("run", nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_RELAY_DATABASE_URL=postgres://") ||
		!strings.Contains(err.Error(), "OUTBOX_RELAY_KAFKA_BROKERS=") {
		t.Fatalf("got %v", err)
	}
}

func TestExitCodes(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"version"}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "outbox-relay") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"bogus"}, &out, &errOut); code != 2 {
		t.Fatalf("unknown command exit %d", code)
	}
	if code := run([]string{"run", "--help"}, &out, &errOut); code != 0 {
		t.Fatalf("run --help exit %d", code)
	}
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "")
	if code := run([]string{"migrate"}, &out, &errOut); code != 2 {
		t.Fatalf("invalid config exit %d", code)
	}
	// doctor: 4 when the checks could not run (1 stays "a check failed").
	errOut.Reset()
	if code := run([]string{"doctor", "--database-url", "postgres://u@127.0.0.1:1/db?connect_timeout=1", "--kafka-brokers", "127.0.0.1:1"}, &out, &errOut); code != exitNotChecked {
		t.Fatalf("doctor without a database: exit %d, want %d\n%s", code, exitNotChecked, errOut.String())
	}
}

func TestLeaderConfig(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_LEADER_TIMEOUT", "4s")
	cfg, err := parse("run", []string{"--leader-keepalive-interval", "500ms", "--leader-poll-interval", "1s"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if rc := cfg.Relay; rc.Leader.Timeout != 4*time.Second || rc.Leader.KeepaliveInterval != 500*time.Millisecond || rc.Leader.PollInterval != time.Second || rc.Database.Slot != "outbox_relay" {
		t.Fatalf("leader config %+v", rc.Leader)
	}
	_, err = parse("run", []string{"--leader-keepalive-interval", "3s", "--leader-poll-interval", "3s", "--wal-sender-timeout", "500ms"}, &bytes.Buffer{})
	if err == nil {
		t.Fatal("inconsistent leader timeouts accepted")
	}
	for _, want := range []string{"keepalive interval 3s", "poll interval 3s", "--wal-sender-timeout 500ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestStallTimeoutConfig(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	cfg, err := parse("run", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.Window.StallTimeout != time.Minute {
		t.Fatalf("default --stall-timeout %s, want 1m", cfg.Relay.Window.StallTimeout)
	}
	t.Setenv("OUTBOX_RELAY_STALL_TIMEOUT", "0")
	if cfg, err = parse("run", nil, &bytes.Buffer{}); err != nil || cfg.Relay.Window.StallTimeout != -1 {
		t.Fatalf("OUTBOX_RELAY_STALL_TIMEOUT=0 (off, relay.Config's -1): %v %v", cfg, err)
	}
	t.Setenv("OUTBOX_RELAY_STALL_TIMEOUT", "5s")
	if cfg, err = parse("run", nil, &bytes.Buffer{}); err != nil || cfg.Relay.Window.StallTimeout != 5*time.Second {
		t.Fatalf("OUTBOX_RELAY_STALL_TIMEOUT=5s: %v", err)
	}
	_, err = parse("run", []string{"--stall-timeout", "-1s"}, &bytes.Buffer{})
	if _, ok := err.(configError); !ok || !strings.Contains(fmt.Sprint(err), `--stall-timeout "-1s": negative: use 0 or more`) {
		t.Fatalf("negative --stall-timeout: %T %v", err, err)
	}
}

// TestPartitionRefreshAndIdleTimeout: the publisher's partition refresh
// and idle eviction are configurable (defaults 1m and 2m), and must be
// positive.
func TestPartitionRefreshAndIdleTimeout(t *testing.T) {
	base := []string{"--database-url", "postgres://u@h:5432/db", "--kafka-brokers", "a:9092"}
	cfg, err := parse("run", base, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Relay.Publish; p.PartitionRefresh != time.Minute || p.TopicIdleTimeout != 2*time.Minute {
		t.Fatalf("defaults: refresh %s, idle %s", p.PartitionRefresh, p.TopicIdleTimeout)
	}
	t.Setenv("OUTBOX_RELAY_TOPIC_IDLE_TIMEOUT", "30s")
	cfg, err = parse("run", append(base, "--partition-refresh", "5s"), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Relay.Publish; p.PartitionRefresh != 5*time.Second || p.TopicIdleTimeout != 30*time.Second {
		t.Fatalf("set: refresh %s, idle %s", p.PartitionRefresh, p.TopicIdleTimeout)
	}
	_, err = parse("run", append(base, "--partition-refresh", "0s"), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "--partition-refresh") {
		t.Fatalf("zero refresh: %v", err)
	}
}

// TestValuesInTheFormsPeopleType: sizes with units, durations with days
// and a libpq keyword/value connection string (its password redacted).
func TestValuesInTheFormsPeopleType(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_WAL_DISK_BUDGET", "50GB")
	sink := redact.NewWriter(&bytes.Buffer{})
	cfg, err := parse("run", []string{
		"--database-url", "host=db port=5432 dbname=app user=relay password=kw-secret-1 sslmode=verify-full",
		"--max-inflight-bytes", "16MiB", "--max-batch-bytes", "900KiB", "--checkpoint-retention", "7d",
		"--cleanup-older-than", "1d12h",
	}, sink)
	if err != nil {
		t.Fatal(err)
	}
	rc := cfg.Relay
	if rc.Window.MaxBytes != 16<<20 || rc.Publish.MaxBatchBytes != 900<<10 || rc.Stats.WALDiskBudget != 50e9 ||
		rc.Checkpoints.Retention != 7*24*time.Hour || rc.Cleanup.OlderThan != 36*time.Hour {
		t.Fatalf("config %+v", rc)
	}
	if got := sink.String("password=kw-secret-1"); got != "password="+redact.Mask {
		t.Fatalf("keyword password not redacted: %q", got)
	}
	if _, err := parse("run", []string{"--database-url", "mysql://x", "--max-inflight-bytes", "1048576"}, sink); err == nil ||
		!strings.Contains(err.Error(), "key=value connection string") {
		t.Fatalf("mysql URL: %v", err)
	}
}

// TestRecordFormatFlags: --record-format and its options reach the relay's
// and the side publishers' configuration, and are validated with flag
// names.
func TestRecordFormatFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "127.0.0.1:9092")
	cfg, err := parse("run", []string{"--record-format", "cloudevents", "--cloudevents-source", "/orders", "--cloudevents-mode", "structured",
		"--tombstone-on-null-payload"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	want := publisher.DefaultConfig().Record
	want.Format, want.CloudEventsSource, want.CloudEventsMode, want.TombstoneOnNullPayload = record.FormatCloudEvents, "/orders", record.CloudEventsStructured, true
	if got := cfg.Relay.Publish.Record; got != want {
		t.Fatalf("relay record config %+v", got)
	}
	if got := cfg.Publish("x").Config.Record; got != want {
		t.Fatalf("side publisher record config %+v", got)
	}
	t.Setenv("OUTBOX_RELAY_RECORD_FORMAT", "debezium")
	if cfg, err = parse("run", []string{"--debezium-expand-json-payload"}, &bytes.Buffer{}); err != nil ||
		cfg.Relay.Publish.Record != debeziumWant() {
		t.Fatalf("%+v %v", cfg.Relay.Publish.Record, err)
	}
	for args, msg := range map[string]string{
		"--record-format xml":  `--record-format "xml": use native, debezium, cloudevents, avro, protobuf or json-schema`,
		"--record-format avro": "--schema-registry-url is required",
		"--record-format avro --schema-registry-url registry:8081":                                   "--schema-registry-url",
		"--schema-registry-url http://r:8081":                                                        "--schema-registry-url: is only used with a registry format",
		"--schema-version latest":                                                                    `--schema-version "latest": is only used with a registry format`,
		"--schema-subject-strategy record":                                                           `--schema-subject-strategy "record": is only used with a registry format`,
		"--schema-key":                                                                               `--schema-key: is only used with a registry format`,
		"--record-format protobuf --schema-registry-url http://r --schema-key":                       `--schema-key: a key schema is not available with the protobuf format`,
		"--record-format avro --schema-registry-url http://r --schema-version newest":                `--schema-version "newest": use row or latest`,
		"--record-format avro --schema-registry-url http://r --schema-subject-strategy event":        `--schema-subject-strategy "event": use topic, record or topic-record`,
		"--schema-registry-timeout 3s":                                                               "--schema-registry-timeout 3s is only used with a registry format",
		"--schema-registry-password pw":                                                              "--schema-registry-password is only used with a registry format",
		"--record-format avro --schema-registry-url http://r --schema-registry-ca-file /nonexistent": "--schema-registry-ca-file",
		"--record-format cloudevents":                                                                "--cloudevents-source: is required with --record-format cloudevents",
		"--cloudevents-mode batch":                                                                   `--cloudevents-mode "batch": use binary or structured`,
		"--record-format cloudevents --cloudevents-source a%zz":                                      "--cloudevents-source",
	} {
		_, err := parse("run", strings.Fields(args), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", args, err, msg)
		}
	}
}

// debeziumWant is the record configuration of --record-format debezium
// --debezium-expand-json-payload: the defaults otherwise.
func debeziumWant() record.Config {
	w := publisher.DefaultConfig().Record
	w.Format, w.DebeziumExpandJSON = record.FormatDebezium, true
	return w
}

// runNames are run's flags by the field each sets (its Go path), as
// errors name them ("--failover-slot=false" for a negated field).
func runNames() map[string]string {
	return envflag.Names(commandFlags("run"))
}

// relayLeaves lists the Go paths of relay.Config's fields that are not
// structs themselves, with their values in c.
func relayLeaves(v reflect.Value, prefix string, out map[string]reflect.Value) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		switch {
		case f.Anonymous: // promoted: Publish.MaxBatch, not Publish.Config.MaxBatch
			relayLeaves(v.Field(i), prefix, out)
		case f.Type.Kind() == reflect.Struct:
			relayLeaves(v.Field(i), prefix+f.Name+".", out)
		default:
			out[prefix+f.Name] = v.Field(i)
		}
	}
}

// TestEveryRelayFieldHasAFlag: run has a flag for every field of
// relay.Config but the two kafkaconn builds from several flags (Kafka.TLS,
// Kafka.SASL) and the hook pgauth builds from --database-password-file and
// --database-auth (Database.BeforeConnect), and each flag's path (derived from the pointer it is bound
// to) names the field it sets.
func TestEveryRelayFieldHasAFlag(t *testing.T) {
	sweep(t)
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	names := runNames()
	leaves := map[string]reflect.Value{}
	relayLeaves(reflect.ValueOf(relay.DefaultConfig()), "", leaves)
	for path := range leaves {
		built := path == "Kafka.TLS" || path == "Kafka.SASL" || path == "Database.BeforeConnect" || path == "Publish.Record.Registry.TLS"
		if _, ok := names[path]; !ok && !built {
			t.Errorf("relay.Config's %s has no flag", path)
		}
	}
	for path, name := range names {
		flagName, _, _ := strings.Cut(name, "=") // "--failover-slot", where names has "--failover-slot=false"
		if _, relayField := leaves[path]; !relayField && (strings.HasPrefix(path, "kafkaconn.") || strings.HasPrefix(path, "RegistryTLS.") || path == "Kafka.Brokers" ||
			!strings.Contains(path, ".") || strings.HasPrefix(path, "PGAuth.") || strings.HasPrefix(path, "Trace.")) {
			continue // built from --kafka-brokers and the TLS/SASL flags, or the binary's own
		}
		leaf, ok := leaves[path]
		if !ok {
			t.Errorf("%s sets %s, not a field of relay.Config", flagName, path)
			continue
		}
		var set []string
		for _, value := range twoValues(leaf) {
			cfg, err := parse("run", []string{flagName + "=" + value}, io.Discard)
			if err != nil && !strings.Contains(err.Error(), flagName) {
				t.Fatalf("%s: %v", flagName, err)
			}
			if cfg == nil {
				// Valid alone, refused by a rule over other fields:
				// parsed, which is what this test is about.
				set = append(set, value)
				continue
			}
			got := map[string]reflect.Value{}
			relayLeaves(reflect.ValueOf(cfg.Relay), "", got)
			set = append(set, fmt.Sprint(got[path].Interface()))
		}
		if set[0] == set[1] {
			t.Errorf("%s does not set %s", flagName, path)
		}
	}
}

// twoValues are two different flag values of v's type.
func twoValues(v reflect.Value) []string {
	switch {
	case v.Kind() == reflect.Bool:
		return []string{"true", "false"}
	case v.Kind() == reflect.String:
		return []string{"x", "y"}
	case v.Type() == reflect.TypeFor[time.Duration]():
		return []string{"1s", "2s"}
	}
	return []string{"2048", "4096"}
}

// TestZeroFlagsReachTheRelayAsOff: every flag of a relay.Config field with
// a non-zero default passes a 0 on as -1 (its "off"), or is refused naming
// the 0 the user gave, never as relay.Config's "the default".
func TestZeroFlagsReachTheRelayAsOff(t *testing.T) {
	sweep(t)
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	def := map[string]reflect.Value{}
	relayLeaves(reflect.ValueOf(relay.DefaultConfig()), "", def)
	n := 0
	for path, name := range runNames() {
		flagName, _, _ := strings.Cut(name, "=")
		d, ok := def[path]
		if !ok || !d.CanInt() || d.Int() == 0 {
			continue
		}
		n++
		cfg, err := parse("run", []string{flagName, "0"}, &bytes.Buffer{})
		switch {
		case err != nil && !strings.Contains(err.Error(), flagName+" 0"):
			t.Errorf("%s 0: refused without the 0 given: %v", flagName, err)
		case err == nil:
			got := map[string]reflect.Value{}
			relayLeaves(reflect.ValueOf(cfg.Relay), "", got)
			if got[path].Int() != -1 {
				t.Errorf("%s 0: relay.Config's %s is %v, want -1", flagName, path, got[path])
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d flags of fields with a non-zero default", n)
	}
}

// TestLogLevelsAreTheRelays: only debug, info, warn and error; disabled,
// panic, fatal or trace would silence the warnings about insecure
// settings, or are not levels the relay logs at (issue 36, row 6).
func TestLogLevelsAreTheRelays(t *testing.T) {
	for _, lvl := range []string{"debug", "info", "warn", "error", "INFO"} {
		if _, err := parse("migrate", []string{"--log-level", lvl}, &bytes.Buffer{}); err != nil && strings.Contains(err.Error(), "--log-level") {
			t.Errorf("--log-level %s refused: %v", lvl, err)
		}
	}
	for _, lvl := range []string{"disabled", "panic", "fatal", "trace", "", "loud"} {
		_, err := parse("migrate", []string{"--log-level", lvl}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "use debug, info, warn or error") && !(lvl == "" && strings.Contains(err.Error(), "empty")) {
			t.Errorf("--log-level %q: %v", lvl, err)
		}
	}
}

// TestConflictingFlags: flags that were accepted and then ignored or
// misused are refused with the fix (issue 36, row 7).
func TestConflictingFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--positions-topic", "a/b"}, `--positions-topic: invalid Kafka topic name "a/b"`},
		{[]string{"--transaction-interval", "5ms"}, "--transaction-interval 5ms is only used with --delivery exactly-once (--delivery is at-least-once)"},
		{[]string{"--transactional-id", "x"}, "--transactional-id x is only used with --delivery exactly-once"},
		// Profiles on their own loopback listener only (issue 36, row 2).
		{[]string{"--pprof", "--pprof-addr", "0.0.0.0:6060"}, `--pprof-addr "0.0.0.0:6060": use a loopback host:port`},
		{[]string{"--pprof", "--pprof-addr", ":6060"}, `--pprof-addr ":6060": use a loopback host:port`},
		{[]string{"--pprof", "--pprof-addr", "db.example:6060"}, `--pprof-addr "db.example:6060"`},
		{[]string{"--topic-replication-factor", "0"}, "--topic-replication-factor 0: use -1 (the brokers' default) or a count of replicas"},
		{[]string{"--topic-replication-factor", "-2"}, "--topic-replication-factor"},
		{[]string{"--topic-replication-factor", "40000"}, "--topic-replication-factor"},
	} {
		_, err := parse("run", c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
		}
	}
	for _, args := range [][]string{
		{"--delivery", "exactly-once", "--transaction-interval", "5ms", "--transactional-id", "x", "--positions-topic", "p.positions"},
		{"--topic-replication-factor", "3"}, {"--topic-replication-factor", "-1"}, {"--pprof"}, {"--pprof", "--pprof-addr", "[::1]:7000"},
		{"--pprof", "--metrics-addr", ""},
	} {
		if _, err := parse("run", args, &bytes.Buffer{}); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}
