package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/pgauth"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/relay"
)

// config is every subcommand's configuration, from flags with
// OUTBOX_RELAY_* environment fallbacks. The relay's flags bind straight
// into Relay, and each one's field path (for the errors relay.Config's
// Validate and the libraries report) is derived from the pointer it is
// bound to (envflag.Binder.Fields); the rest (logging, --metrics-addr,
// --pprof, --max-procs, tracing, migrate's) are the binary's own.
type config struct {
	// Relay is the relay's configuration. bind starts it from
	// relay.DefaultConfig, so a field without a flag in the command keeps
	// its default. Parsed, it holds the flags' values as given; validate
	// then passes each flag's 0 on as -1 (explicitZeros) and adds Kafka's
	// brokers, TLS and SASL, built from KafkaBrokers and KafkaConn.
	Relay relay.Config
	// KafkaBrokers is --kafka-brokers, comma-separated: Relay.Kafka.Brokers.
	KafkaBrokers string
	// KafkaConn is the Kafka TLS and SASL the flags describe (files,
	// names, credentials); validate builds Relay.Kafka.TLS and SASL from
	// it.
	KafkaConn kafkaconn.Config
	// PGAuth is how to authenticate to PostgreSQL beyond the URL's
	// password; validate sets Relay.Database.BeforeConnect from it.
	PGAuth pgauth.Options

	MetricsAddr, LogLevel, LogFormat string
	PProf                            bool
	PProfAddr                        string
	// MaxProcs is the GOMAXPROCS the streaming commands set (0: the Go
	// runtime's own choice); see procs.go.
	MaxProcs int
	// Trace is the optional publish span and its exporter (tracing.go).
	Trace traceConfig
	// migrate's: the least-privilege role it grants, and the payload
	// column of a table it creates (NullablePayload: without NOT NULL).
	GrantRole, PayloadType        string
	GrantCleanup, NullablePayload bool
	// failoverSlotSet records that --failover-slot (the negation of
	// Relay.Database.NoFailoverSlot) was given, on the command line or in
	// the environment: only then does migrate change an existing slot's
	// flag.
	failoverSlotSet bool

	// flagText names configuration fields by the flags that set them, in
	// library text (flagtext.go); set once the flags are parsed.
	flagText func(string) string

	// secretFiles are the files secrets were read from (<ENV>_FILE, the
	// password and token files), for warnInsecure's permission check.
	secretFiles []string

	// Derived by validate.
	kafkaSecurity kafkaconn.Security
	table         migrations.Table
	template      publisher.TopicTemplate
	level         zerolog.Level
}

// kafkaConnPrefix prefixes the field paths of config.KafkaConn, which
// kafkaconn's errors name without it ("TLS.CAFile").
const kafkaConnPrefix = "kafkaconn."

// scope selects which flags a subcommand takes.
type scope int

const (
	scopeDB      scope = 1 << iota // database, slot, publication, table
	scopeKafka                     // brokers, topics, batching
	scopeRun                       // run-only knobs
	scopeMigrate                   // migrate-only knobs
)

// bind registers the flags of the given scopes on b, with the defaults of
// relay.DefaultConfig, bound to the fields they set.
func (c *config) bind(b *envflag.Binder, s scope) {
	c.Relay = relay.DefaultConfig()
	b.Fields(&c.Relay, "")
	b.Fields(&c.KafkaConn, kafkaConnPrefix)
	d, r := relay.DefaultConfig(), &c.Relay
	b.String(&c.LogLevel, "log-level", "info", "log level: debug, info, warn, error")
	b.String(&c.LogFormat, "log-format", "json", "log format: json or console")
	if s&scopeDB != 0 {
		b.ConnString(&r.Database.URL, "database-url", "", "PostgreSQL URL, e.g. postgres://user:pass@host:5432/db?sslmode=verify-full&sslrootcert=/etc/ssl/pg-ca.pem, or key=value connection string, e.g. 'host=db dbname=app user=relay sslmode=verify-full'").
			Required("postgres://user:pass@host:5432/db")
		b.String(&r.Database.Slot, "slot", d.Database.Slot, "logical replication slot name")
		b.String(&r.Database.Publication, "publication", d.Database.Publication, "publication name")
		b.String(&r.Database.Table, "table", d.Database.Table, "outbox table, optionally schema-qualified")
		b.String(&c.PGAuth.PasswordFile, "database-password-file", "", "file holding the PostgreSQL password, re-read at every connection, so a rotated secret (a mounted Kubernetes secret) is used without a restart; one trailing newline is dropped; instead of a password in --database-url")
		b.String(&c.PGAuth.Auth, "database-auth", pgauth.AuthPassword, "how to authenticate to PostgreSQL: password (--database-url's or --database-password-file's) or aws-rds-iam (a fresh RDS IAM token as the password at every connection; needs TLS: sslmode=verify-full)")
		b.String(&c.PGAuth.AWSRegion, "database-aws-region", "", "AWS region of the RDS instance, for --database-auth aws-rds-iam (default: AWS_REGION or the AWS config's)")
	}
	if s&scopeKafka != 0 {
		c.bindKafka(b, d)
	}
	if s&scopeMigrate != 0 {
		b.String(&c.GrantRole, "grant-role", "", "create (if missing) a role for `run` and grant it REPLICATION and exactly the table privileges the relay needs (e.g. outbox_relay)")
		b.Bool(&c.GrantCleanup, "grant-cleanup", false, "with --grant-role: also grant DELETE on the outbox, for run --cleanup-older-than")
		b.String(&c.PayloadType, "payload-type", migrations.PayloadJSONB, "payload column type of a table migrate creates: jsonb or bytea")
		b.Bool(&c.NullablePayload, "nullable-payload", false, "create the table's payload column without NOT NULL, so a row with a NULL payload can stand for a tombstone (run --tombstone-on-null-payload)")
		bindFailoverSlot(b, &r.Database.NoFailoverSlot, "; set explicitly, migrate also sets an existing slot's flag to it (stop the relay first)")
	}
	if s&scopeRun != 0 {
		c.bindRun(b, d)
		c.Trace.bind(b)
		bindFailoverSlot(b, &r.Database.NoFailoverSlot, "; applies when the relay creates a missing slot (an existing slot keeps its flag: migrate --failover-slot changes it)")
	}
}

// bindFailoverSlot registers --failover-slot (migrate, slot create, run,
// recover: every command that creates the slot), the negation of
// Database.NoFailoverSlot, into no; more ends its help.
func bindFailoverSlot(b *envflag.Binder, no *bool, more string) {
	b.NotBool(no, "failover-slot", !relay.DefaultConfig().Database.NoFailoverSlot,
		"create the logical slot with failover = true on PostgreSQL 17+, so a standby with sync_replication_slots = on keeps it "+
			"through a failover; false opts out; ignored before 17"+more)
}

// bindKafka registers the Kafka flags: brokers, topics, batching, and the
// TLS and SASL of every Kafka connection.
func (c *config) bindKafka(b *envflag.Binder, d relay.Config) {
	p, dp := &c.Relay.Publish, d.Publish
	b.String(&c.KafkaBrokers, "kafka-brokers", "", "comma-separated Kafka bootstrap brokers, e.g. 127.0.0.1:9092").To("Kafka.Brokers").Required("host:9092[,host2:9092]")
	b.String(&p.TopicTemplate, "topic-template", dp.TopicTemplate, "topic name template; placeholders {aggregate_type}, {event_type}")
	b.Bool(&p.CreateTopics, "create-topics", dp.CreateTopics, "create missing topics")
	b.Int(&p.TopicPartitions, "topic-partitions", dp.TopicPartitions, "partitions of topics the relay creates")
	b.Int(&p.TopicReplicationFactor, "topic-replication-factor", dp.TopicReplicationFactor, "replication factor of topics the relay creates (-1: broker default)")
	b.Int(&p.MaxBatch, "max-batch", dp.MaxBatch, "most events in one partition batch")
	b.IntSize(&p.MaxBatchBytes, "max-batch-bytes", dp.MaxBatchBytes, "most bytes in one partition batch, e.g. 900KiB; keep under the broker's message.max.bytes")
	b.Duration(&p.Linger, "linger", dp.Linger, "how long a partition batch waits for other partitions' batches to share its produce request (0: send at once)")
	b.Duration(&p.BackoffBase, "backoff-base", dp.BackoffBase, "first retry delay (exponential, full jitter)")
	b.Duration(&p.BackoffMax, "backoff-max", dp.BackoffMax, "longest retry delay")
	b.Duration(&c.Relay.Kafka.MetadataTTL, "metadata-ttl", d.Kafka.MetadataTTL, "Kafka metadata refresh; bounds the stall after a partition leader change")
	b.Duration(&p.UnknownTopicTimeout, "unknown-topic-timeout", dp.UnknownTopicTimeout, "how long a missing topic is retried before its events are poison (without --create-topics), and a partition that vanished before the relay stops")
	b.Duration(&p.PartitionRefresh, "partition-refresh", dp.PartitionRefresh, "how often a topic's partition count is re-read (added partitions are used once the topic's earlier events are acknowledged)")
	b.Duration(&p.TopicIdleTimeout, "topic-idle-timeout", dp.TopicIdleTimeout, "how long an unused topic keeps its router and partition lanes (goroutines, queues)")
	envflag.StringVar(b, &p.RecordFormat, "record-format", dp.RecordFormat, "record format: native, debezium (the record Debezium's Outbox Event Router emits) or cloudevents (docs/formats.md)")
	b.String(&p.CloudEventsSource, "cloudevents-source", dp.CloudEventsSource, "CloudEvents source attribute, a URI-reference naming the producer, e.g. /orders-service; required with --record-format cloudevents")
	envflag.StringVar(b, &p.CloudEventsMode, "cloudevents-mode", dp.CloudEventsMode, "CloudEvents content mode: binary (attributes in ce_* headers, the payload as the value) or structured (the event as a JSON value)")
	b.Bool(&p.DebeziumExpandJSON, "debezium-expand-json-payload", dp.DebeziumExpandJSON, "with --record-format debezium: write JSON payloads as the router does with table.expand.json.payload=true and the JsonConverter (compact, null members dropped)")
	b.NotBool(&p.NoIdempotence, "idempotent", !dp.NoIdempotence, "write with the idempotent producer (a producer id, numbered batches), so the broker discards a retried batch it already stored; false only for brokers or ACLs that refuse it (docs/kafka.md)")
	envflag.StringVar(b, &p.Delivery, "delivery", dp.Delivery, "delivery guarantee into Kafka: at-least-once (consumers deduplicate, as inbox does) or exactly-once (Kafka transactions with the source position: read_committed consumers see each event once; docs/exactly-once.md)")
	b.Duration(&p.TransactionInterval, "transaction-interval", dp.TransactionInterval, "with --delivery exactly-once: how long a Kafka transaction collects events before it commits; the next commits as soon as the previous one returned once it is this old, so the default is group commit (raise it for fewer, larger commits and more latency)")
	b.Duration(&p.TransactionTimeout, "transaction-timeout", dp.TransactionTimeout, "with --delivery exactly-once: the transaction.timeout.ms asked for; the coordinator aborts a transaction a dead relay left open this long (at most the brokers' transaction.max.timeout.ms)")
	b.String(&p.TransactionalID, "transactional-id", dp.TransactionalID, "with --delivery exactly-once: the transactional id, the same on every replica of the slot so a new leader fences the old (default: outbox-relay-<system identifier>-<database>-<slot>, so relays of different databases never share it)")
	b.String(&p.PositionsTopic, "positions-topic", dp.PositionsTopic, "with --delivery exactly-once: the compacted topic where each Kafka transaction records the source position it covers, keyed by <system identifier>/<database>/<slot>; several relays may share it")
	b.Bool(&p.TombstoneOnNullPayload, "tombstone-on-null-payload", dp.TombstoneOnNullPayload, "an outbox row with a NULL payload becomes a tombstone (its key and headers, a null value) for compacted topics, instead of a poison event")
	tls, sasl := &c.KafkaConn.TLS, &c.KafkaConn.SASL
	b.Bool(&tls.Enabled, "kafka-tls", false, "connect to Kafka with TLS (implied by any --kafka-tls-* file or name)")
	b.String(&tls.CAFile, "kafka-tls-ca-file", "", "PEM CA bundle that signed the brokers' certificates (default: system roots)")
	b.String(&tls.CertFile, "kafka-tls-cert-file", "", "PEM client certificate, for brokers with ssl.client.auth=required")
	b.String(&tls.KeyFile, "kafka-tls-key-file", "", "PEM private key (unencrypted) of --kafka-tls-cert-file")
	b.String(&tls.ServerName, "kafka-tls-server-name", "", "name the brokers' certificates must carry (default: each broker's host)")
	b.Bool(&tls.InsecureSkipVerify, "kafka-tls-insecure-skip-verify", false, "accept any broker certificate (tests only: anyone can impersonate the broker)")
	b.String(&sasl.Mechanism, "kafka-sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (empty: no SASL)")
	b.String(&sasl.Username, "kafka-sasl-username", "", "SASL username")
	b.Secret(&sasl.Password, "kafka-sasl-password", "", "SASL password")
	o := &sasl.OAuth
	b.String(&o.TokenFile, "kafka-sasl-oauth-token-file", "", "OAUTHBEARER: file holding the token (a JWT), re-read for every new connection (a sidecar keeps it fresh)")
	b.String(&o.TokenEndpoint, "kafka-sasl-oauth-token-endpoint", "", "OAUTHBEARER: the identity provider's token URL, for the OAuth client-credentials grant")
	b.String(&o.ClientID, "kafka-sasl-oauth-client-id", "", "OAUTHBEARER client-credentials: client id")
	b.Secret(&o.ClientSecret, "kafka-sasl-oauth-client-secret", "", "OAUTHBEARER client-credentials: client secret")
	b.String(&o.Scope, "kafka-sasl-oauth-scope", "", "OAUTHBEARER client-credentials: space-separated scope (empty: the client's default)")
	b.String(&o.Extensions, "kafka-sasl-oauth-extensions", "", "OAUTHBEARER: SASL extensions sent with the token, key=value,... (Confluent Cloud: logicalCluster=lkc-...,identityPoolId=pool-...)")
	b.Duration(&c.Relay.Kafka.SessionLifetime, "kafka-sasl-session-lifetime", 0, "the brokers' connections.max.reauth.ms, if set: Kafka connections are recycled before it (and before a token expires), since kafka-go cannot re-authenticate (0: token expiry only)")
}

// bindRun registers the flags of the streaming commands (run, recover).
func (c *config) bindRun(b *envflag.Binder, d relay.Config) {
	r := &c.Relay
	b.OptionalString(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9187", "address serving /metrics; empty disables")
	b.Duration(&r.Database.HeartbeatInterval, "heartbeat-interval", d.Database.HeartbeatInterval, "cadence of WAL heartbeats that let an idle outbox advance the slot; 0 disables")
	b.Duration(&r.Database.StatusInterval, "status-interval", d.Database.StatusInterval, "cadence of standby status updates; keep well under wal_sender_timeout")
	b.Duration(&r.ShutdownTimeout, "shutdown-timeout", d.ShutdownTimeout, "how long SIGTERM waits for in-flight events to be acknowledged")
	b.Int(&r.Window.MaxEvents, "max-inflight-events", d.Window.MaxEvents, "most unacknowledged events held in memory")
	b.Size(&r.Window.MaxBytes, "max-inflight-bytes", d.Window.MaxBytes, "most unacknowledged bytes held in memory, e.g. 16MiB")
	envflag.StringVar(b, &r.Publish.PoisonPolicy, "poison-policy", d.Publish.PoisonPolicy, "poison events: quarantine (dead-letter it, park its aggregate) or halt (stop, slot position held)")
	b.Duration(&r.Database.SlotCheckInterval, "slot-check-interval", d.Database.SlotCheckInterval, "how often the running relay checks the slot's health (wal_status)")
	b.Duration(&r.Window.StallTimeout, "stall-timeout", d.Window.StallTimeout, "events in flight with no acknowledgement for this long is a stall: logged, outbox_relay_stalled=1, /readyz 503; 0 disables")
	b.Int(&c.MaxProcs, "max-procs", defaultMaxProcs(), "most OS threads running Go code at once (GOMAXPROCS); 1 suits the single replication stream best (docs/benchmarks.md); 0 keeps the Go runtime's choice, which is the default when GOMAXPROCS is set")
	b.Bool(&c.PProf, "pprof", false, "also serve Go's /debug/pprof/ profiles, on --pprof-addr")
	b.String(&c.PProfAddr, "pprof-addr", "127.0.0.1:6060", "with --pprof: the loopback address (host:port) of the profiles, a listener of their own, never --metrics-addr's")
	b.Duration(&r.Checkpoints.Interval, "checkpoint-interval", d.Checkpoints.Interval, "cadence of checkpoint saves (acknowledged position, for skip-ahead, recover and replay); 0 disables")
	b.Duration(&r.Checkpoints.Retention, "checkpoint-retention", d.Checkpoints.Retention, "how long checkpoint history is kept (bounds replay --from-lsn/--since); keep it at least the outbox retention; 0 keeps it all")
	b.Duration(&r.Cleanup.OlderThan, "cleanup-older-than", d.Cleanup.OlderThan, "while leader, delete confirmed outbox rows older than this every --cleanup-interval (0: off; see outbox-relay cleanup)")
	b.Duration(&r.Cleanup.Interval, "cleanup-interval", d.Cleanup.Interval, "cadence of the leader's cleanup runs (each bounded by half of it)")
	b.Duration(&r.Leader.PollInterval, "leader-poll-interval", d.Leader.PollInterval, "how often a standby tries to take the leader lock; bounds the takeover after a leader stops")
	b.Duration(&r.Leader.KeepaliveInterval, "leader-keepalive-interval", d.Leader.KeepaliveInterval, "how often the leader checks its lock connection")
	b.Duration(&r.Leader.Timeout, "leader-timeout", d.Leader.Timeout, "a leader unable to confirm its lock for half of this stops streaming; PostgreSQL frees the lock of a session silent this long")
	b.Group("Leader", "leader-timeout", "leader-keepalive-interval", "leader-poll-interval")
	b.Duration(&r.Database.WALSenderTimeout, "wal-sender-timeout", d.Database.WALSenderTimeout, "wal_sender_timeout of the relay's replication session: how long the server keeps a silent relay's slot busy; 0 keeps the server's setting")
	b.Duration(&r.Stats.Interval, "stats-interval", d.Stats.Interval,
		"cadence of the PostgreSQL statistics metrics (slot lag, retained WAL, exhaustion forecast, outbox table size); 0 disables")
	b.Size(&r.Stats.WALDiskBudget, "wal-disk-budget", d.Stats.WALDiskBudget,
		"bytes of WAL the slot may retain on the server's disk, a target for the exhaustion forecast besides safe_wal_size, e.g. 50GB; 0: none")
}

// explicitZeros passes a flag's 0 on to relay.Config as -1, generically:
// every numeric field of c whose default (relay.DefaultConfig) is not 0.
// In relay.Config a zero field means its default, while on the command
// line every flag shows its default and a 0 is the user's: it turns the
// knob off (-1 is relay.Config's "off"; a negative flag value is refused
// as it is parsed: envflag) or is refused by
// Validate, and flagError then shows the 0 the user gave. A field without
// a flag in the command holds its default (bind starts from
// DefaultConfig), never 0.
func explicitZeros(c *relay.Config) { envflag.ExplicitZeros(c, relay.DefaultConfig()) }

// failoverSlot reports whether the slot a command creates is a failover
// slot (--failover-slot).
func (c *config) failoverSlot() bool { return !c.Relay.Database.NoFailoverSlot }

// publisherConfig is the configuration of a publisher beside the relay
// (recover's and replay's back-fills, dlq's writer): the relay's topics,
// batching and retries over the same Kafka connection settings.
func (c *config) publisherConfig(clientID string) publisher.Config {
	p := c.Relay.Publish
	return publisher.Config{
		Brokers: c.Relay.Kafka.Brokers, Template: c.template, Transport: c.kafkaTransport(clientID),
		MaxBatch: p.MaxBatch, MaxBatchBytes: p.MaxBatchBytes, Linger: p.Linger,
		BackoffBase: p.BackoffBase, BackoffMax: p.BackoffMax,
		CreateTopics: p.CreateTopics, TopicPartitions: p.TopicPartitions, TopicReplicationFactor: p.TopicReplicationFactor,
		UnknownTopicTimeout: p.UnknownTopicTimeout, MetadataRefresh: p.PartitionRefresh, TopicIdleTimeout: p.TopicIdleTimeout,
		Record: p.Record(),
	}
}

// validate checks the configuration of scope s and derives typed values:
// the relay's fields through relay.Config.Validate, the binary's own here.
// Each error names its flag and says how to fix it.
func (c *config) validate(b *envflag.Binder, s scope) error {
	errs := append([]error(nil), b.Errs()...)
	c.secretFiles = slices.Clone(b.SecretFiles())
	for _, f := range []string{c.PGAuth.PasswordFile, c.KafkaConn.SASL.OAuth.TokenFile} {
		if f != "" {
			c.secretFiles = append(c.secretFiles, f)
		}
	}
	c.failoverSlotSet = b.IsSet("failover-slot")
	// Only the levels the relay logs at: disabled, panic or fatal would
	// silence every warning, the insecure-setting ones included.
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel))
	if err != nil || lvl < zerolog.DebugLevel || lvl > zerolog.ErrorLevel {
		errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel))
	}
	c.level = lvl
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("--log-format %q: use json or console", c.LogFormat))
	}
	k := &c.Relay.Kafka
	k.Brokers = nil
	for _, br := range strings.Split(c.KafkaBrokers, ",") {
		if br = strings.TrimSpace(br); br != "" {
			k.Brokers = append(k.Brokers, br)
		}
	}
	if s&scopeKafka != 0 {
		// Loaded now, so a missing file or a certificate without its key
		// is a configuration error (exit 2).
		sec, err := c.KafkaConn.Build()
		errs = append(errs, kafkaFlagErrors(b, err)...)
		c.kafkaSecurity = sec
		k.TLS, k.SASL = sec.TLS, sec.SASL
	}
	if s&scopeDB != 0 {
		hook, err := c.PGAuth.Build(context.Background(), c.Relay.Database.URL)
		if err != nil {
			errs = append(errs, err)
		}
		c.Relay.Database.BeforeConnect = hook
	}
	errs = append(errs, c.conflicts(b, s)...)
	// Validated with the flags' 0s passed on as -1; the errors show the
	// flags' values, as given (flagError).
	rc := c.Relay
	explicitZeros(&rc)
	for _, e := range unjoin(rc.Validate()) {
		var fe *relay.FieldError
		if !errors.As(e, &fe) {
			errs = append(errs, e)
		} else if fe := flagError(b, fe); fe != nil {
			errs = append(errs, fe)
		}
	}
	c.Relay = rc
	c.table, _ = migrations.ParseTable(c.Relay.Database.Table)
	c.template, _ = publisher.ParseTopicTemplate(c.Relay.Publish.TopicTemplate)
	if s&scopeMigrate != 0 {
		errs = append(errs, c.validateMigrate()...)
	}
	if s&scopeRun != 0 {
		if c.MetricsAddr != "" {
			if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
				errs = append(errs, fmt.Errorf("--metrics-addr %q is not host:port (empty disables metrics)", c.MetricsAddr))
			}
		}
		if c.MaxProcs < 0 || c.MaxProcs > maxProcsLimit {
			errs = append(errs, fmt.Errorf("--max-procs %d: use 1 (the default), a larger count up to %d, or 0 for the Go runtime's choice", c.MaxProcs, maxProcsLimit))
		}
		errs = append(errs, c.Trace.validate()...)
	}
	return errors.Join(errs...)
}

// conflicts are flags that are valid alone but not with the others: a
// setting that would be ignored is refused rather than silently dropped.
func (c *config) conflicts(b *envflag.Binder, s scope) []error {
	var errs []error
	p := c.Relay.Publish
	if p.Delivery != relay.ExactlyOnce {
		for _, f := range []struct{ name, value string }{{"transaction-interval", p.TransactionInterval.String()},
			{"transaction-timeout", p.TransactionTimeout.String()}, {"transactional-id", p.TransactionalID}} {
			if b.IsSet(f.name) {
				errs = append(errs, fmt.Errorf("--%s %s is only used with --delivery exactly-once (--delivery is %s): drop it, or set --delivery exactly-once", f.name, f.value, p.Delivery))
			}
		}
	}
	if b.IsSet("topic-replication-factor") && p.TopicReplicationFactor == 0 {
		errs = append(errs, errors.New("--topic-replication-factor 0: use -1 (the brokers' default) or a count of replicas, e.g. 3"))
	}
	if s&scopeRun != 0 && c.PProf {
		// Profiles and goroutine stacks describe the process from the
		// inside: never on the probe port, which the chart exposes.
		if host, _, err := net.SplitHostPort(c.PProfAddr); err != nil || !allLoopback(host) || host == "" {
			errs = append(errs, fmt.Errorf("--pprof-addr %q: use a loopback host:port such as 127.0.0.1:6060 (profiles are never served beyond this machine)", c.PProfAddr))
		}
	}
	return errs
}

// maxProcsLimit bounds --max-procs: every P can hold an OS thread, and a
// count in the tens of thousands ends the process with "thread
// exhaustion" and a stack trace of a million lines. No machine the relay
// runs on has more cores than this.
const maxProcsLimit = 1024

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

// Error is one line for one problem, and a list for several (each on its
// own line, so none hides behind the first).
func (e configError) Error() string {
	if msg := e.err.Error(); !strings.Contains(msg, "\n") {
		return "invalid configuration: " + msg
	}
	return "invalid configuration:\n" + indent(e.err.Error())
}
func (e configError) Unwrap() error { return e.err }

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
