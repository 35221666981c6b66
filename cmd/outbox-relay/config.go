package main

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
)

// config is every subcommand's configuration, from flags with
// OUTBOX_RELAY_* environment fallbacks, named after the flags. The relay's
// knobs map to relay.Config (relayConfig), which validates them; the rest
// (logging, --metrics-addr, --pprof, --max-procs, migrate's) are the
// binary's own.
type config struct {
	DatabaseURL, Slot, Publication, Table                  string
	KafkaBrokers, TopicTemplate, PoisonPolicy, PayloadType string
	MetricsAddr, LogLevel, LogFormat                       string
	HeartbeatInterval, StatusInterval, SlotCheckInterval   time.Duration
	WALSenderTimeout, ShutdownTimeout, StallTimeout        time.Duration
	MaxInflightEvents, MaxBatch, MaxBatchBytes             int
	MaxInflightBytes, WALDiskBudget                        int64
	Linger, BackoffBase, BackoffMax, MetadataTTL           time.Duration
	UnknownTopicWait, PartitionRefresh, TopicIdleTimeout   time.Duration
	CreateTopics, PProf                                    bool
	TopicPartitions, TopicReplication                      int
	CheckpointInterval, CheckpointRetention, StatsInterval time.Duration
	LeaderPollInterval, LeaderKeepaliveInterval            time.Duration
	LeaderTimeout                                          time.Duration
	CleanupSchedule                                        relay.CleanupConfig
	// MaxProcs is the GOMAXPROCS the streaming commands set (0: the Go
	// runtime's own choice); see procs.go.
	MaxProcs int
	// Trace is the optional publish span and its exporter (tracing.go).
	Trace traceConfig
	// Kafka TLS and SASL (kafkaconn.Config's TLS.* and SASL.* fields),
	// and the least-privilege role migrate grants.
	KafkaTLS, KafkaTLSInsecure, GrantCleanup                  bool
	KafkaTLSCAFile, KafkaTLSCertFile, KafkaTLSKeyFile         string
	KafkaTLSServerName, KafkaSASLMechanism, KafkaSASLUsername string
	KafkaSASLPassword, GrantRole                              string
	// NullablePayload: migrate creates the payload column nullable.
	NullablePayload bool
	// The record format (record.Config) of every publishing
	// command, so that run, recover, replay and dlq retry write alike.
	RecordFormat, CloudEventsSource, CloudEventsMode string
	DebeziumExpandJSON, TombstoneOnNullPayload       bool
	// FailoverSlot: the slot migrate, slot create, run and recover create
	// is a failover slot on PostgreSQL 17+. failoverSlotSet records that
	// it was given (flag or environment): only then does migrate change
	// an existing slot's flag.
	FailoverSlot    bool
	failoverSlotSet bool

	// Derived by validate.
	kafkaSecurity kafkaconn.Security
	table         migrations.Table
	brokers       []string
	template      publisher.TopicTemplate
	level         zerolog.Level
}

// scope selects which flags a subcommand takes.
type scope int

const (
	scopeDB      scope = 1 << iota // database, slot, publication, table
	scopeKafka                     // brokers, topics, batching
	scopeRun                       // run-only knobs
	scopeMigrate                   // migrate-only knobs
)

// bind registers the flags of the given scopes on b, with the defaults of
// relay.DefaultConfig, and records which relay.Config field each sets.
func (c *config) bind(b *envflag.Binder, s scope) {
	d := relay.DefaultConfig()
	b.String(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	b.String(&c.LogFormat, "log-format", "json", "log format: json or console")
	if s&scopeDB != 0 {
		b.ConnString(&c.DatabaseURL, "database-url", "", "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=/etc/ssl/pg-ca.pem, or key=value connection string, e.g. 'host=db dbname=app user=relay sslmode=verify-full'").
			To("Database.URL").Required("postgres://user:pass@host:5432/db")
		b.String(&c.Slot, "slot", d.Database.Slot, "logical replication slot name").To("Database.Slot")
		b.String(&c.Publication, "publication", d.Database.Publication, "publication name").To("Database.Publication")
		b.String(&c.Table, "table", d.Database.Table, "outbox table, optionally schema-qualified").To("Database.Table")
	}
	if s&scopeKafka != 0 {
		c.bindKafka(b, d)
	}
	if s&scopeMigrate != 0 {
		b.String(&c.GrantRole, "grant-role", "", "create (if missing) a role for `run` and grant it REPLICATION and exactly the table privileges the relay needs (e.g. outbox_relay)")
		b.Bool(&c.GrantCleanup, "grant-cleanup", false, "with --grant-role: also grant DELETE on the outbox, for run --cleanup-older-than")
		b.String(&c.PayloadType, "payload-type", migrations.PayloadJSONB, "payload column type of a table migrate creates: jsonb or bytea")
		b.Bool(&c.NullablePayload, "nullable-payload", false, "create the table's payload column without NOT NULL, so a row with a NULL payload can stand for a tombstone (run --tombstone-on-null-payload)")
		bindFailoverSlot(b, &c.FailoverSlot, "; set explicitly, migrate also sets an existing slot's flag to it (stop the relay first)")
	}
	if s&scopeRun != 0 {
		c.bindRun(b, d)
		c.Trace.bind(b)
		bindFailoverSlot(b, &c.FailoverSlot, "; applies when the relay creates a missing slot (an existing slot keeps its flag: migrate --failover-slot changes it)")
	}
}

// bindFailoverSlot registers --failover-slot (migrate, slot create, run,
// recover: every command that creates the slot) into p; more ends its help.
func bindFailoverSlot(b *envflag.Binder, p *bool, more string) {
	b.Bool(p, "failover-slot", !relay.DefaultConfig().Database.NoFailoverSlot,
		"create the logical slot with failover = true on PostgreSQL 17+, so a standby with sync_replication_slots = on keeps it "+
			"through a failover; false opts out; ignored before 17"+more).To("Database.NoFailoverSlot")
}

// bindKafka registers the Kafka flags: brokers, topics, batching, and the
// TLS and SASL of every Kafka connection.
func (c *config) bindKafka(b *envflag.Binder, d relay.Config) {
	p := d.Publish
	b.String(&c.KafkaBrokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers, e.g. 127.0.0.1:9092").To("Kafka.Brokers").Required("host:9092[,host2:9092]")
	b.String(&c.TopicTemplate, "topic-template", p.TopicTemplate, "topic name template; placeholders {aggregate_type}, {event_type}").To("Publish.TopicTemplate")
	b.Bool(&c.CreateTopics, "create-topics", p.CreateTopics, "create missing topics")
	b.Int(&c.TopicPartitions, "topic-partitions", p.TopicPartitions, "partitions of topics the relay creates").To("Publish.TopicPartitions")
	b.Int(&c.TopicReplication, "topic-replication-factor", p.TopicReplicationFactor, "replication factor of topics the relay creates (-1: broker default)")
	b.Int(&c.MaxBatch, "max-batch", p.MaxBatch, "most events in one partition batch").To("Publish.MaxBatch")
	b.IntSize(&c.MaxBatchBytes, "max-batch-bytes", p.MaxBatchBytes, "most bytes in one partition batch, e.g. 900KiB; keep under the broker's message.max.bytes").To("Publish.MaxBatchBytes")
	b.Duration(&c.Linger, "linger", p.Linger, "how long a partition batch waits for other partitions' batches to share its produce request (0: send at once)").To("Publish.Linger")
	b.Duration(&c.BackoffBase, "backoff-base", p.BackoffBase, "first retry delay (exponential, full jitter)").To("Publish.BackoffBase")
	b.Duration(&c.BackoffMax, "backoff-max", p.BackoffMax, "longest retry delay").To("Publish.BackoffMax")
	b.Duration(&c.MetadataTTL, "metadata-ttl", d.Kafka.MetadataTTL, "Kafka metadata refresh; bounds the stall after a partition leader change").To("Kafka.MetadataTTL")
	b.Duration(&c.UnknownTopicWait, "unknown-topic-timeout", p.UnknownTopicTimeout, "how long a missing topic is retried before its events are poison (without --create-topics), and a partition that vanished before the relay stops").To("Publish.UnknownTopicTimeout")
	b.Duration(&c.PartitionRefresh, "partition-refresh", p.PartitionRefresh, "how often a topic's partition count is re-read (added partitions are used once the topic's earlier events are acknowledged)").To("Publish.PartitionRefresh")
	b.Duration(&c.TopicIdleTimeout, "topic-idle-timeout", p.TopicIdleTimeout, "how long an unused topic keeps its router and partition lanes (goroutines, queues)").To("Publish.TopicIdleTimeout")
	b.String(&c.RecordFormat, "record-format", string(p.RecordFormat), "record format: native, debezium (the record Debezium's Outbox Event Router emits) or cloudevents (docs/formats.md)").To("Publish.RecordFormat")
	b.String(&c.CloudEventsSource, "cloudevents-source", p.CloudEventsSource, "CloudEvents source attribute, a URI-reference naming the producer, e.g. /orders-service; required with --record-format cloudevents").To("Publish.CloudEventsSource")
	b.String(&c.CloudEventsMode, "cloudevents-mode", string(p.CloudEventsMode), "CloudEvents content mode: binary (attributes in ce_* headers, the payload as the value) or structured (the event as a JSON value)").To("Publish.CloudEventsMode")
	b.Bool(&c.DebeziumExpandJSON, "debezium-expand-json-payload", p.DebeziumExpandJSON, "with --record-format debezium: write JSON payloads as the router does with table.expand.json.payload=true and the JsonConverter (compact, null members dropped)").To("Publish.DebeziumExpandJSON")
	b.Bool(&c.TombstoneOnNullPayload, "tombstone-on-null-payload", p.TombstoneOnNullPayload, "an outbox row with a NULL payload becomes a tombstone (its key and headers, a null value) for compacted topics, instead of a poison event").To("Publish.TombstoneOnNullPayload")
	b.Bool(&c.KafkaTLS, "kafka-tls", false, "connect to Kafka with TLS (implied by any --kafka-tls-* file or name)")
	b.String(&c.KafkaTLSCAFile, "kafka-tls-ca-file", "", "PEM CA bundle that signed the brokers' certificates (default: system roots)").To("TLS.CAFile")
	b.String(&c.KafkaTLSCertFile, "kafka-tls-cert-file", "", "PEM client certificate, for brokers with ssl.client.auth=required").To("TLS.CertFile")
	b.String(&c.KafkaTLSKeyFile, "kafka-tls-key-file", "", "PEM private key (unencrypted) of --kafka-tls-cert-file").To("TLS.KeyFile")
	b.String(&c.KafkaTLSServerName, "kafka-tls-server-name", "", "name the brokers' certificates must carry (default: each broker's host)")
	b.Bool(&c.KafkaTLSInsecure, "kafka-tls-insecure-skip-verify", false, "accept any broker certificate (tests only: anyone can impersonate the broker)").To("TLS.InsecureSkipVerify")
	b.String(&c.KafkaSASLMechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (empty: no SASL)").To("SASL.Mechanism")
	b.String(&c.KafkaSASLUsername, "kafka-sasl-username", "", "SASL username").To("SASL.Username")
	b.Secret(&c.KafkaSASLPassword, "kafka-sasl-password", "", "SASL password").To("SASL.Password")
}

// bindRun registers the flags of the streaming commands (run, recover).
func (c *config) bindRun(b *envflag.Binder, d relay.Config) {
	b.String(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9187", "address serving /metrics; empty disables")
	b.Duration(&c.HeartbeatInterval, "heartbeat-interval", d.Database.HeartbeatInterval, "cadence of WAL heartbeats that let an idle outbox advance the slot; 0 disables").To("Database.HeartbeatInterval")
	b.Duration(&c.StatusInterval, "status-interval", d.Database.StatusInterval, "cadence of standby status updates; keep well under wal_sender_timeout").To("Database.StatusInterval")
	b.Duration(&c.ShutdownTimeout, "shutdown-timeout", d.ShutdownTimeout, "how long SIGTERM waits for in-flight events to be acknowledged").To("ShutdownTimeout")
	b.Int(&c.MaxInflightEvents, "max-inflight-events", d.Window.MaxEvents, "most unacknowledged events held in memory").To("Window.MaxEvents")
	b.Size(&c.MaxInflightBytes, "max-inflight-bytes", d.Window.MaxBytes, "most unacknowledged bytes held in memory, e.g. 16MiB").To("Window.MaxBytes")
	b.String(&c.PoisonPolicy, "poison-policy", string(d.Publish.PoisonPolicy), "poison events: quarantine (dead-letter it, park its aggregate) or halt (stop, slot position held)").To("Publish.PoisonPolicy")
	b.Duration(&c.SlotCheckInterval, "slot-check-interval", d.Database.SlotCheckInterval, "how often the running relay checks the slot's health (wal_status)").To("Database.SlotCheckInterval")
	b.Duration(&c.StallTimeout, "stall-timeout", d.Window.StallTimeout, "events in flight with no acknowledgement for this long is a stall: logged, outbox_relay_stalled=1, /readyz 503; 0 disables").To("Window.StallTimeout")
	b.Int(&c.MaxProcs, "max-procs", defaultMaxProcs(), "most OS threads running Go code at once (GOMAXPROCS); 1 suits the single replication stream best (docs/benchmarks.md); 0 keeps the Go runtime's choice, which is the default when GOMAXPROCS is set")
	b.Bool(&c.PProf, "pprof", false, "also serve Go's /debug/pprof/ profiles on --metrics-addr (keep that address private)")
	b.Duration(&c.CheckpointInterval, "checkpoint-interval", d.Checkpoints.Interval, "cadence of checkpoint saves (acknowledged position, for skip-ahead, recover and replay); 0 disables").To("Checkpoints.Interval")
	b.Duration(&c.CheckpointRetention, "checkpoint-retention", d.Checkpoints.Retention, "how long checkpoint history is kept (bounds replay --from-lsn/--since); keep it at least the outbox retention; 0 keeps it all").To("Checkpoints.Retention")
	b.Duration(&c.CleanupSchedule.OlderThan, "cleanup-older-than", d.Cleanup.OlderThan, "while leader, delete confirmed outbox rows older than this every --cleanup-interval (0: off; see outbox-relay cleanup)").To("Cleanup.OlderThan")
	b.Duration(&c.CleanupSchedule.Interval, "cleanup-interval", d.Cleanup.Interval, "cadence of the leader's cleanup runs (each bounded by half of it)").To("Cleanup.Interval")
	b.Duration(&c.LeaderPollInterval, "leader-poll-interval", d.Leader.PollInterval, "how often a standby tries to take the leader lock; bounds the takeover after a leader stops")
	b.Duration(&c.LeaderKeepaliveInterval, "leader-keepalive-interval", d.Leader.KeepaliveInterval, "how often the leader checks its lock connection")
	b.Duration(&c.LeaderTimeout, "leader-timeout", d.Leader.Timeout, "a leader unable to confirm its lock for half of this stops streaming; PostgreSQL frees the lock of a session silent this long")
	b.Group("Leader", "leader-timeout", "leader-keepalive-interval", "leader-poll-interval")
	b.Duration(&c.WALSenderTimeout, "wal-sender-timeout", d.Database.WALSenderTimeout, "wal_sender_timeout of the relay's replication session: how long the server keeps a silent relay's slot busy; 0 keeps the server's setting").To("Database.WALSenderTimeout")
	b.Duration(&c.StatsInterval, "stats-interval", d.Stats.Interval,
		"cadence of the PostgreSQL statistics metrics (slot lag, retained WAL, exhaustion forecast, outbox table size); 0 disables").To("Stats.Interval")
	b.Size(&c.WALDiskBudget, "wal-disk-budget", d.Stats.WALDiskBudget,
		"bytes of WAL the slot may retain on the server's disk, a target for the exhaustion forecast besides safe_wal_size, e.g. 50GB; 0: none").To("Stats.WALDiskBudget")
}

// relayConfig is the relay's configuration from the flags. Every flag has
// its default filled in already, so a 0 on the command line is the
// user's: it goes on as -1 (explicit), since 0 in relay.Config means "the
// default". For the flags whose 0 turns their knob off (zeroOffFlags) -1
// is relay.Config's "off"; for the others Validate rejects it, and
// flagError shows the 0 the user gave.
func (c *config) relayConfig() relay.Config {
	return relay.Config{
		Database: relay.DatabaseConfig{
			URL: c.DatabaseURL, Slot: c.Slot, Publication: c.Publication, Table: c.Table,
			StatusInterval: explicit(c.StatusInterval), HeartbeatInterval: explicit(c.HeartbeatInterval),
			SlotCheckInterval: explicit(c.SlotCheckInterval), WALSenderTimeout: c.WALSenderTimeout,
			NoFailoverSlot: !c.FailoverSlot,
		},
		Kafka: c.kafka(),
		Publish: relay.PublishConfig{
			TopicTemplate: c.TopicTemplate, CreateTopics: c.CreateTopics,
			TopicPartitions: explicit(c.TopicPartitions), TopicReplicationFactor: c.TopicReplication,
			MaxBatch: explicit(c.MaxBatch), MaxBatchBytes: explicit(c.MaxBatchBytes), Linger: explicit(c.Linger),
			BackoffBase: explicit(c.BackoffBase), BackoffMax: explicit(c.BackoffMax), UnknownTopicTimeout: explicit(c.UnknownTopicWait),
			PartitionRefresh: explicit(c.PartitionRefresh), TopicIdleTimeout: explicit(c.TopicIdleTimeout),
			PoisonPolicy: poison.Policy(c.PoisonPolicy),
			RecordFormat: record.Format(c.RecordFormat), CloudEventsSource: c.CloudEventsSource,
			CloudEventsMode: record.CloudEventsMode(c.CloudEventsMode), DebeziumExpandJSON: c.DebeziumExpandJSON,
			TombstoneOnNullPayload: c.TombstoneOnNullPayload,
		},
		Window: relay.WindowConfig{MaxEvents: explicit(c.MaxInflightEvents), MaxBytes: explicit(c.MaxInflightBytes),
			StallTimeout: explicit(c.StallTimeout)},
		Leader: relay.LeaderConfig{
			PollInterval: explicit(c.LeaderPollInterval), KeepaliveInterval: explicit(c.LeaderKeepaliveInterval),
			Timeout: explicit(c.LeaderTimeout),
		},
		Checkpoints:     relay.CheckpointConfig{Interval: explicit(c.CheckpointInterval), Retention: explicit(c.CheckpointRetention)},
		Cleanup:         relay.CleanupConfig{OlderThan: c.CleanupSchedule.OlderThan, Interval: explicit(c.CleanupSchedule.Interval)},
		Stats:           relay.StatsConfig{Interval: explicit(c.StatsInterval), WALDiskBudget: c.WALDiskBudget},
		ShutdownTimeout: explicit(c.ShutdownTimeout),
	}
}

// explicit is a flag's value for relay.Config: 0 becomes -1 (see
// relayConfig).
func explicit[T ~int | ~int64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// zeroOffFlags are the flags whose 0 turns their knob off; a negative
// value is refused (relay.Config would read it as off too, but on the
// command line it is a mistake).
func (c *config) zeroOffFlags() map[string]time.Duration {
	return map[string]time.Duration{
		"heartbeat-interval": c.HeartbeatInterval, "linger": c.Linger, "stall-timeout": c.StallTimeout,
		"checkpoint-interval": c.CheckpointInterval, "checkpoint-retention": c.CheckpointRetention,
		"cleanup-older-than": c.CleanupSchedule.OlderThan, "stats-interval": c.StatsInterval,
	}
}

// publisherConfig is the configuration of a publisher beside the relay
// (recover's and replay's back-fills, dlq's writer): the relay's topics,
// batching and retries over the same Kafka connection settings.
func (c *config) publisherConfig(clientID string) publisher.Config {
	return publisher.Config{
		Brokers: c.brokers, Template: c.template, Transport: c.kafkaTransport(clientID),
		MaxBatch: c.MaxBatch, MaxBatchBytes: c.MaxBatchBytes, Linger: c.Linger,
		BackoffBase: c.BackoffBase, BackoffMax: c.BackoffMax,
		CreateTopics: c.CreateTopics, TopicPartitions: c.TopicPartitions, TopicReplicationFactor: c.TopicReplication,
		UnknownTopicTimeout: c.UnknownTopicWait, MetadataRefresh: c.PartitionRefresh, TopicIdleTimeout: c.TopicIdleTimeout,
		Record: c.relayConfig().Publish.Record(),
	}
}

// validate checks the configuration of scope s and derives typed values:
// the relay's fields through relay.Config.Validate, the binary's own here.
// Each error names its flag and says how to fix it.
func (c *config) validate(b *envflag.Binder, s scope) error {
	errs := append([]error(nil), b.Errs()...)
	c.failoverSlotSet = b.IsSet("failover-slot")
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel))
	if err != nil || c.LogLevel == "" {
		errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel))
	}
	c.level = lvl
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("--log-format %q: use json or console", c.LogFormat))
	}
	c.brokers = nil
	for _, br := range strings.Split(c.KafkaBrokers, ",") {
		if br = strings.TrimSpace(br); br != "" {
			c.brokers = append(c.brokers, br)
		}
	}
	if s&scopeKafka != 0 {
		// Loaded now, so a missing file or a certificate without its key
		// is a configuration error (exit 2).
		sec, err := c.kafkaConn().Build()
		errs = append(errs, kafkaFlagErrors(b, err)...)
		c.kafkaSecurity = sec
	}
	for _, name := range slices.Sorted(maps.Keys(c.zeroOffFlags())) {
		if v := c.zeroOffFlags()[name]; v < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: use 0 (off) or a positive duration", name, v))
		}
	}
	for _, e := range unjoin(c.relayConfig().Validate()) {
		var fe *relay.FieldError
		if !errors.As(e, &fe) {
			errs = append(errs, e)
		} else if fe := flagError(b, fe); fe != nil {
			errs = append(errs, fe)
		}
	}
	c.table, _ = migrations.ParseTable(c.Table)
	c.template, _ = publisher.ParseTopicTemplate(c.TopicTemplate)
	if s&scopeMigrate != 0 {
		errs = append(errs, c.validateMigrate()...)
	}
	if s&scopeRun != 0 {
		if c.MetricsAddr != "" {
			if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
				errs = append(errs, fmt.Errorf("--metrics-addr %q is not host:port (empty disables metrics)", c.MetricsAddr))
			}
		}
		if c.MaxProcs < 0 {
			errs = append(errs, fmt.Errorf("--max-procs %d: use 1 (the default), a larger count, or 0 for the Go runtime's choice", c.MaxProcs))
		}
		errs = append(errs, c.Trace.validate()...)
	}
	return errors.Join(errs...)
}

func (c *config) validateMigrate() []error {
	var errs []error
	if c.GrantCleanup && c.GrantRole == "" {
		errs = append(errs, errors.New("--grant-cleanup needs --grant-role NAME (the role to grant DELETE on the outbox to)"))
	}
	if c.GrantRole != "" && !outboxdb.ValidName(c.GrantRole) {
		errs = append(errs, fmt.Errorf("--grant-role %q: use 1-63 lower-case letters, digits and underscores, e.g. outbox_relay", c.GrantRole))
	}
	if c.PayloadType != migrations.PayloadJSONB && c.PayloadType != migrations.PayloadBytea {
		errs = append(errs, fmt.Errorf("--payload-type %q: use jsonb or bytea", c.PayloadType))
	}
	return errs
}

// unjoin lists the errors err joins (none for nil).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// configError marks an invalid configuration (exit code 2).
type configError struct{ err error }

func (e configError) Error() string { return "invalid configuration:\n" + indent(e.err.Error()) }
func (e configError) Unwrap() error { return e.err }

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
