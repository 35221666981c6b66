package main

import (
	"errors"
	"flag"
	"fmt"
	"github.com/rs/zerolog"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/leader"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// envPrefix prefixes the environment fallback of every flag.
const envPrefix = "OUTBOX_RELAY_"

// config is the relay's configuration, from flags with OUTBOX_RELAY_*
// environment fallbacks.
type config struct {
	DatabaseURL       string
	KafkaBrokers      string
	Slot              string
	Publication       string
	Table             string
	TopicTemplate     string
	MetricsAddr       string
	LogLevel          string
	LogFormat         string
	HeartbeatInterval time.Duration
	StatusInterval    time.Duration
	ShutdownTimeout   time.Duration
	MaxInflightEvents int
	MaxInflightBytes  int64
	MaxBatch          int
	MaxBatchBytes     int
	Linger            time.Duration
	BackoffBase       time.Duration
	BackoffMax        time.Duration
	CreateTopics      bool
	TopicPartitions   int
	TopicReplication  int
	PayloadType       string
	PoisonPolicy      string
	MetadataTTL       time.Duration
	UnknownTopicWait  time.Duration
	// PartitionRefresh is how often a topic's partition count is re-read;
	// TopicIdleTimeout how long an unused topic keeps its router and lanes
	// (publisher.Config).
	PartitionRefresh  time.Duration
	TopicIdleTimeout  time.Duration
	SlotCheckInterval time.Duration
	PProf             bool
	// MaxProcs is the GOMAXPROCS the run command sets (0: the Go
	// runtime's own choice); see procs.go.
	MaxProcs int
	// CheckpointInterval is the cadence of checkpoint saves (0: off);
	// CheckpointRetention bounds the checkpoint history.
	CheckpointInterval  time.Duration
	CheckpointRetention time.Duration
	// CleanupSchedule is the leader's optional cleanup (cleanupschedule.go).
	CleanupSchedule cleanupScheduleConfig
	// testStatusHold delays standby status updates (tests only, from
	// OUTBOX_RELAY_TEST_STATUS_HOLD; see testhook.go).
	testStatusHold time.Duration

	// StallTimeout is how long events may wait in flight without any
	// acknowledgement before the relay reports a stall (0: never; see
	// package stall and observe in run.go).
	StallTimeout time.Duration

	// Leader election and liveness of the connections (leader.Config).
	LeaderPollInterval      time.Duration
	LeaderKeepaliveInterval time.Duration
	LeaderTimeout           time.Duration
	WALSenderTimeout        time.Duration

	// PostgreSQL statistics (stats.go).
	statsConfig

	// Security: Kafka TLS/SASL, the least-privilege role (issue 5).
	KafkaTLS           bool
	KafkaTLSCAFile     string
	KafkaTLSCertFile   string
	KafkaTLSKeyFile    string
	KafkaTLSServerName string
	KafkaTLSInsecure   bool
	KafkaSASLMechanism string
	KafkaSASLUsername  string
	KafkaSASLPassword  string
	GrantRole          string
	GrantCleanup       bool
	kafkaSecurity      kafkaconn.Security

	// Derived by validate.
	table    migrations.Table
	brokers  []string
	template publisher.TopicTemplate
	level    zerolog.Level
	policy   deadletter.Policy
}

// envName maps a flag name to its environment variable.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagBinder registers flags whose defaults come from the environment, and
// remembers malformed environment values to report them at validation.
type flagBinder struct {
	fs   *flag.FlagSet
	errs []error
}

func (b *flagBinder) env(name string) (string, bool) { return os.LookupEnv(envName(name)) }

func (b *flagBinder) usage(name, help string) string {
	return fmt.Sprintf("%s (env %s)", help, envName(name))
}

func (b *flagBinder) str(p *string, name, def, help string) {
	if v, ok := b.env(name); ok {
		def = v
	}
	b.fs.StringVar(p, name, def, b.usage(name, help))
}

// secret is str for a secret: its value may also come from the file
// named by <ENV>_FILE (trailing newlines dropped), so it need not sit in
// the environment or on the command line (visible in ps).
func (b *flagBinder) secret(p *string, name, def, help string) {
	env := envName(name)
	if path, ok := os.LookupEnv(env + "_FILE"); ok {
		if _, both := b.env(name); both {
			b.errs = append(b.errs, fmt.Errorf("both %s and %s_FILE are set: keep one", env, env))
		} else if v, err := os.ReadFile(path); err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s_FILE: %w (point it at a readable file holding the value)", env, err))
		} else {
			def = strings.TrimRight(string(v), "\r\n")
		}
	} else if v, ok := b.env(name); ok {
		def = v
	}
	b.fs.StringVar(p, name, def, fmt.Sprintf("%s (env %s or %s_FILE)", help, env, env))
}

func (b *flagBinder) dur(p *time.Duration, name string, def time.Duration, help string) {
	if v, ok := b.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not a duration: use a value like 500ms, 10s or 1m", envName(name), v))
		} else {
			def = d
		}
	}
	b.fs.DurationVar(p, name, def, b.usage(name, help))
}

func (b *flagBinder) int(p *int, name string, def int, help string) {
	if v, ok := b.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not an integer", envName(name), v))
		} else {
			def = n
		}
	}
	b.fs.IntVar(p, name, def, b.usage(name, help))
}

func (b *flagBinder) int64(p *int64, name string, def int64, help string) {
	if v, ok := b.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not an integer", envName(name), v))
		} else {
			def = n
		}
	}
	b.fs.Int64Var(p, name, def, b.usage(name, help))
}

func (b *flagBinder) bool(p *bool, name string, def bool, help string) {
	if v, ok := b.env(name); ok {
		t, err := strconv.ParseBool(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not a boolean: use true or false", envName(name), v))
		} else {
			def = t
		}
	}
	b.fs.BoolVar(p, name, def, b.usage(name, help))
}

// scope selects which flags a subcommand takes.
type scope int

const (
	scopeDB      scope = 1 << iota // database, slot, publication, table
	scopeKafka                     // brokers, topics, batching
	scopeRun                       // run-only knobs
	scopeMigrate                   // migrate-only knobs
)

// bind registers the flags of the given scopes on fs.
func (c *config) bind(fs *flag.FlagSet, s scope) *flagBinder {
	b := &flagBinder{fs: fs}
	b.str(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	b.str(&c.LogFormat, "log-format", "json", "log format: json or console")
	if s&scopeDB != 0 {
		b.secret(&c.DatabaseURL, "database-url", "", "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=/etc/ssl/pg-ca.pem")
		b.str(&c.Slot, "slot", "outbox_relay", "logical replication slot name")
		b.str(&c.Publication, "publication", "outbox_relay", "publication name")
		b.str(&c.Table, "table", "public.outbox", "outbox table, optionally schema-qualified")
	}
	if s&scopeKafka != 0 {
		b.str(&c.KafkaBrokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers, e.g. 127.0.0.1:9092")
		b.str(&c.TopicTemplate, "topic-template", publisher.DefaultTopicTemplate, "topic name template; placeholders {aggregate_type}, {event_type}")
		b.bool(&c.CreateTopics, "create-topics", false, "create missing topics")
		b.int(&c.TopicPartitions, "topic-partitions", 6, "partitions of topics the relay creates")
		b.int(&c.TopicReplication, "topic-replication-factor", -1, "replication factor of topics the relay creates (-1: broker default)")
		b.int(&c.MaxBatch, "max-batch", 1000, "most events in one partition batch")
		b.int(&c.MaxBatchBytes, "max-batch-bytes", 900<<10, "most bytes in one partition batch; keep under the broker's message.max.bytes")
		b.dur(&c.Linger, "linger", 5*time.Millisecond, "how long a partition batch waits for other partitions' batches to share its produce request (0: send at once)")
		b.dur(&c.BackoffBase, "backoff-base", 100*time.Millisecond, "first retry delay (exponential, full jitter)")
		b.dur(&c.BackoffMax, "backoff-max", 10*time.Second, "longest retry delay")
		b.dur(&c.MetadataTTL, "metadata-ttl", time.Second, "Kafka metadata refresh; bounds the stall after a partition leader change")
		b.dur(&c.UnknownTopicWait, "unknown-topic-timeout", time.Minute, "how long a missing topic is retried before its events are poison (without --create-topics), and a partition that vanished before the relay stops")
		b.dur(&c.PartitionRefresh, "partition-refresh", time.Minute, "how often a topic's partition count is re-read (added partitions are used once the topic's earlier events are acknowledged)")
		b.dur(&c.TopicIdleTimeout, "topic-idle-timeout", 2*time.Minute, "how long an unused topic keeps its router and partition lanes (goroutines, queues)")
	}
	// Security: Kafka TLS and SASL (every Kafka connection), the
	// least-privilege role migrate can grant.
	if s&scopeKafka != 0 {
		b.bool(&c.KafkaTLS, "kafka-tls", false, "connect to Kafka with TLS (implied by any --kafka-tls-* file or name)")
		b.str(&c.KafkaTLSCAFile, "kafka-tls-ca-file", "", "PEM CA bundle that signed the brokers' certificates (default: system roots)")
		b.str(&c.KafkaTLSCertFile, "kafka-tls-cert-file", "", "PEM client certificate, for brokers with ssl.client.auth=required")
		b.str(&c.KafkaTLSKeyFile, "kafka-tls-key-file", "", "PEM private key (unencrypted) of --kafka-tls-cert-file")
		b.str(&c.KafkaTLSServerName, "kafka-tls-server-name", "", "name the brokers' certificates must carry (default: each broker's host)")
		b.bool(&c.KafkaTLSInsecure, "kafka-tls-insecure-skip-verify", false, "accept any broker certificate (tests only: anyone can impersonate the broker)")
		b.str(&c.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)")
		b.str(&c.KafkaSASLUsername, "kafka-sasl-username", "", "SASL username")
		b.secret(&c.KafkaSASLPassword, "kafka-sasl-password", "", "SASL password")
	}
	if s&scopeMigrate != 0 {
		b.str(&c.GrantRole, "grant-role", "", "create (if missing) a role for `run` and grant it REPLICATION and exactly the table privileges the relay needs (e.g. outbox_relay)")
		b.bool(&c.GrantCleanup, "grant-cleanup", false, "with --grant-role: also grant DELETE on the outbox, for run --cleanup-older-than")
	}
	if s&scopeMigrate != 0 {
		b.str(&c.PayloadType, "payload-type", migrations.PayloadJSONB, "payload column type of a table migrate creates: jsonb or bytea")
	}
	if s&scopeRun != 0 {
		b.str(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9187", "address serving /metrics; empty disables")
		b.dur(&c.HeartbeatInterval, "heartbeat-interval", 10*time.Second, "cadence of WAL heartbeats that let an idle outbox advance the slot; 0 disables")
		b.dur(&c.StatusInterval, "status-interval", time.Second, "cadence of standby status updates; keep well under wal_sender_timeout")
		b.dur(&c.ShutdownTimeout, "shutdown-timeout", 30*time.Second, "how long SIGTERM waits for in-flight events to be acknowledged")
		b.int(&c.MaxInflightEvents, "max-inflight-events", 10000, "most unacknowledged events held in memory")
		b.int64(&c.MaxInflightBytes, "max-inflight-bytes", 16<<20, "most unacknowledged bytes held in memory")
		b.str(&c.PoisonPolicy, "poison-policy", string(deadletter.PolicyQuarantine), "poison events: quarantine (dead-letter it, park its aggregate) or halt (stop, slot position held)")
		b.dur(&c.SlotCheckInterval, "slot-check-interval", 10*time.Second, "how often the running relay checks the slot's health (wal_status)")
		b.dur(&c.StallTimeout, "stall-timeout", time.Minute, "events in flight with no acknowledgement for this long is a stall: logged, outbox_relay_stalled=1, /readyz 503; 0 disables")
		b.int(&c.MaxProcs, "max-procs", defaultMaxProcs(), "most OS threads running Go code at once (GOMAXPROCS); 1 suits the single replication stream best (docs/benchmarks.md); 0 keeps the Go runtime's choice (default 0 when GOMAXPROCS is set)")
		b.bool(&c.PProf, "pprof", false, "also serve Go's /debug/pprof/ profiles on --metrics-addr (keep that address private)")
		b.dur(&c.CheckpointInterval, "checkpoint-interval", time.Second, "cadence of checkpoint saves (acknowledged position, for skip-ahead, recover and replay); 0 disables")
		b.dur(&c.CheckpointRetention, "checkpoint-retention", 7*24*time.Hour, "how long checkpoint history is kept (bounds replay --from-lsn/--since); keep it at least the outbox retention")
		c.testStatusHold = testStatusHold(b)
		c.CleanupSchedule.bind(b)
		b.dur(&c.LeaderPollInterval, "leader-poll-interval", 2*time.Second, "how often a standby tries to take the leader lock; bounds the takeover after a leader stops")
		b.dur(&c.LeaderKeepaliveInterval, "leader-keepalive-interval", time.Second, "how often the leader checks its lock connection")
		b.dur(&c.LeaderTimeout, "leader-timeout", 10*time.Second, "a leader unable to confirm its lock for half of this stops streaming; PostgreSQL frees the lock of a session silent this long")
		b.dur(&c.WALSenderTimeout, "wal-sender-timeout", 0, "wal_sender_timeout of the relay's replication session: how long the server keeps a silent relay's slot busy; 0 keeps the server's setting")
		c.bindStats(b)
	}
	return b
}

// validate checks the configuration of scope s and derives typed values.
// Each error says how to fix it.
func (c *config) validate(b *flagBinder, s scope) error {
	errs := append([]error(nil), b.errs...)
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel))
	if err != nil || c.LogLevel == "" {
		errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel))
	}
	c.level = lvl
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("--log-format %q: use json or console", c.LogFormat))
	}
	if s&scopeDB != 0 {
		if c.DatabaseURL == "" {
			errs = append(errs, errors.New("--database-url is required: set OUTBOX_RELAY_DATABASE_URL=postgres://user:pass@host:5432/db"))
		} else if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			errs = append(errs, fmt.Errorf("--database-url must be a postgres:// URL, e.g. postgres://user:pass@host:5432/db"))
		}
		for _, n := range []struct{ flag, v string }{{"slot", c.Slot}, {"publication", c.Publication}} {
			if !validName(n.v) {
				errs = append(errs, fmt.Errorf("--%s %q: use 1-63 lower-case letters, digits and underscores", n.flag, n.v))
			}
		}
		if t, err := migrations.ParseTable(c.Table); err != nil {
			errs = append(errs, fmt.Errorf("--table: %w", err))
		} else {
			c.table = t
		}
	}
	if s&scopeKafka != 0 {
		c.brokers = nil
		for _, br := range strings.Split(c.KafkaBrokers, ",") {
			br = strings.TrimSpace(br)
			if br == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(br); err != nil {
				errs = append(errs, fmt.Errorf("--kafka-brokers: %q is not host:port", br))
			}
			c.brokers = append(c.brokers, br)
		}
		if len(c.brokers) == 0 {
			errs = append(errs, errors.New("--kafka-brokers is required: set OUTBOX_RELAY_KAFKA_BROKERS=host:9092[,host2:9092]"))
		}
		if t, err := publisher.ParseTopicTemplate(c.TopicTemplate); err != nil {
			errs = append(errs, fmt.Errorf("--topic-template: %w", err))
		} else {
			c.template = t
		}
		if c.MaxBatch < 1 || c.MaxBatch > 100000 {
			errs = append(errs, fmt.Errorf("--max-batch %d: use 1..100000", c.MaxBatch))
		}
		if c.Linger < 0 || c.Linger > time.Second {
			errs = append(errs, fmt.Errorf("--linger %s: use 0..1s (5ms, like the Java producer's linger.ms, is the default)", c.Linger))
		}
		if c.MaxBatchBytes < 1024 {
			errs = append(errs, fmt.Errorf("--max-batch-bytes %d: use at least 1024", c.MaxBatchBytes))
		}
		if c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase {
			errs = append(errs, fmt.Errorf("--backoff-base %s / --backoff-max %s: need 0 < base <= max", c.BackoffBase, c.BackoffMax))
		}
		if c.MetadataTTL <= 0 || c.UnknownTopicWait <= 0 {
			errs = append(errs, fmt.Errorf("--metadata-ttl %s / --unknown-topic-timeout %s: use positive durations", c.MetadataTTL, c.UnknownTopicWait))
		}
		if c.PartitionRefresh <= 0 || c.TopicIdleTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--partition-refresh %s / --topic-idle-timeout %s: use positive durations", c.PartitionRefresh, c.TopicIdleTimeout))
		}
		if c.TopicPartitions < 1 {
			errs = append(errs, fmt.Errorf("--topic-partitions %d: use at least 1", c.TopicPartitions))
		}
	}
	// Security: build the Kafka TLS/SASL setup now, so a missing file or
	// a certificate without its key is a configuration error (exit 2).
	if s&scopeKafka != 0 {
		sec, err := kafkaconn.Config{
			TLS: kafkaconn.TLSConfig{
				Enabled: c.KafkaTLS, CAFile: c.KafkaTLSCAFile, CertFile: c.KafkaTLSCertFile, KeyFile: c.KafkaTLSKeyFile,
				ServerName: c.KafkaTLSServerName, InsecureSkipVerify: c.KafkaTLSInsecure,
			},
			SASL: kafkaconn.SASLConfig{Mechanism: c.KafkaSASLMechanism, Username: c.KafkaSASLUsername, Password: c.KafkaSASLPassword},
		}.Build()
		errs = append(errs, securityFlagErrors(err)...)
		c.kafkaSecurity = sec
	}
	if s&scopeMigrate != 0 && c.GrantCleanup && c.GrantRole == "" {
		errs = append(errs, errors.New("--grant-cleanup needs --grant-role NAME (the role to grant DELETE on the outbox to)"))
	}
	if s&scopeMigrate != 0 && c.GrantRole != "" && !validName(c.GrantRole) {
		errs = append(errs, fmt.Errorf("--grant-role %q: use 1-63 lower-case letters, digits and underscores, e.g. outbox_relay", c.GrantRole))
	}
	if s&scopeMigrate != 0 && c.PayloadType != migrations.PayloadJSONB && c.PayloadType != migrations.PayloadBytea {
		errs = append(errs, fmt.Errorf("--payload-type %q: use jsonb or bytea", c.PayloadType))
	}
	if s&scopeRun != 0 {
		if c.MetricsAddr != "" {
			if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
				errs = append(errs, fmt.Errorf("--metrics-addr %q is not host:port (empty disables metrics)", c.MetricsAddr))
			}
		}
		if c.StatusInterval <= 0 || c.StatusInterval > 30*time.Second {
			errs = append(errs, fmt.Errorf("--status-interval %s: use a value in (0, 30s], well under wal_sender_timeout", c.StatusInterval))
		}
		if c.HeartbeatInterval < 0 {
			errs = append(errs, fmt.Errorf("--heartbeat-interval %s: use 0 (off) or a positive duration", c.HeartbeatInterval))
		}
		if c.ShutdownTimeout <= 0 {
			errs = append(errs, fmt.Errorf("--shutdown-timeout %s: use a positive duration", c.ShutdownTimeout))
		}
		if p, err := deadletter.ParsePolicy(c.PoisonPolicy); err != nil {
			errs = append(errs, fmt.Errorf("--poison-policy: %w", err))
		} else {
			c.policy = p
		}
		if c.CheckpointInterval < 0 || c.CheckpointRetention < 0 {
			errs = append(errs, fmt.Errorf("--checkpoint-interval %s / --checkpoint-retention %s: use 0 (off) or a positive duration", c.CheckpointInterval, c.CheckpointRetention))
		}
		errs = append(errs, c.CleanupSchedule.validate()...)
		if c.StallTimeout < 0 {
			errs = append(errs, fmt.Errorf("--stall-timeout %s: use 0 (off) or a positive duration, e.g. 60s", c.StallTimeout))
		}
		if c.SlotCheckInterval <= 0 {
			errs = append(errs, fmt.Errorf("--slot-check-interval %s: use a positive duration", c.SlotCheckInterval))
		}
		if err := c.leaderConfig().Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--leader-timeout %s, --leader-keepalive-interval %s, --leader-poll-interval %s: %w",
				c.LeaderTimeout, c.LeaderKeepaliveInterval, c.LeaderPollInterval, err))
		}
		if c.WALSenderTimeout != 0 && (c.WALSenderTimeout < time.Second || c.WALSenderTimeout < 3*c.StatusInterval) {
			errs = append(errs, fmt.Errorf("--wal-sender-timeout %s: use 0 (the server's setting) or at least 1s and 3 x --status-interval (%s)",
				c.WALSenderTimeout, 3*c.StatusInterval))
		}
		if c.MaxInflightEvents < 1 {
			errs = append(errs, fmt.Errorf("--max-inflight-events %d: use at least 1", c.MaxInflightEvents))
		}
		if c.MaxInflightBytes < int64(c.MaxBatchBytes) {
			errs = append(errs, fmt.Errorf("--max-inflight-bytes %d: use at least --max-batch-bytes (%d)", c.MaxInflightBytes, c.MaxBatchBytes))
		}
		if c.MaxProcs < 0 {
			errs = append(errs, fmt.Errorf("--max-procs %d: use 1 (the default), a larger count, or 0 for the Go runtime's choice", c.MaxProcs))
		}
		errs = append(errs, c.validateStats()...)
	}
	return errors.Join(errs...)
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// configError marks an invalid configuration (exit code 2).
type configError struct{ err error }

func (e configError) Error() string { return "invalid configuration:\n" + indent(e.err.Error()) }
func (e configError) Unwrap() error { return e.err }

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}

// leaderConfig is the election configuration of run.
func (c *config) leaderConfig() leader.Config {
	return leader.Config{
		DatabaseURL: c.DatabaseURL, Slot: c.Slot,
		PollInterval: c.LeaderPollInterval, KeepaliveInterval: c.LeaderKeepaliveInterval, Timeout: c.LeaderTimeout,
	}
}
