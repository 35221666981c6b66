package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// Config is the whole relay configuration, grouped by component. Set at
// least Database.URL and Kafka.Brokers. A zero field means its default
// (DefaultConfig lists them all), as in the outbox's and the inbox's
// configuration; a knob that can be turned off is off when negative, as
// each field's doc says.
type Config struct {
	// Database is the outbox's PostgreSQL side: where to connect, what to
	// stream and how the replication session is kept alive.
	Database DatabaseConfig
	// Kafka is the one Kafka configuration every client is built from.
	Kafka KafkaConfig
	// Publish shapes what is written to Kafka and how failures are retried.
	Publish PublishConfig
	// Window bounds what is held in memory between the WAL and Kafka.
	Window WindowConfig
	// Leader configures the election among the replicas that run the
	// same slot.
	Leader LeaderConfig
	// Checkpoints configures the saved acknowledged positions.
	Checkpoints CheckpointConfig
	// Cleanup is the leader's optional deletion of relayed outbox rows.
	Cleanup CleanupConfig
	// Stats configures the PostgreSQL statistics metrics.
	Stats StatsConfig
	// ShutdownTimeout is how long Run keeps draining after its context
	// ends: events already read are published and acknowledged, and the
	// slot is confirmed past them, so the next leader re-sends nothing.
	ShutdownTimeout time.Duration
}

// DatabaseConfig describes the outbox table, its slot and publication, and
// the replication session.
type DatabaseConfig struct {
	// URL is the PostgreSQL connection URL (postgres://...). The role
	// needs REPLICATION and the privileges `outbox-relay migrate
	// --grant-role` grants. Use sslmode=verify-full outside localhost.
	URL string
	// ReplicationURL, when set, is a hot standby of URL's server
	// (PostgreSQL 16+) to decode from: the replication stream, the slot
	// and the slot's confirmed position live there, so the primary runs
	// no logical walsender. Everything the relay writes stays on URL:
	// checkpoints, dead letters, the quarantine, cleanup, the heartbeats
	// (which reach the standby by replication and move its slot) and the
	// leader lock. The standby needs hot_standby_feedback = on and a
	// physical slot on the primary (primary_slot_name), or the primary
	// may remove catalog rows the slot needs (docs/high-availability.md).
	// Empty: decode on the primary. BeforeConnect applies to it too.
	ReplicationURL string
	// Slot is the logical replication slot (pgoutput); it must exist
	// (migrate creates it) or is created at the first start.
	Slot string
	// Publication is the publication of the outbox table.
	Publication string
	// Table is the outbox table, optionally schema-qualified.
	Table string
	// StatusInterval is the cadence of standby status updates, which
	// confirm acknowledged positions to the server; keep it well under
	// wal_sender_timeout.
	StatusInterval time.Duration
	// HeartbeatInterval is the cadence of WAL heartbeats
	// (pg_logical_emit_message) that let an idle outbox in a busy
	// database advance the slot, so it never pins WAL; negative disables
	// them.
	HeartbeatInterval time.Duration
	// SlotCheckInterval is how often the leader re-reads the slot: a slot
	// invalidated or dropped while streaming stops the relay instead of
	// hiding that events may be missing.
	SlotCheckInterval time.Duration
	// WALSenderTimeout is wal_sender_timeout for the replication session:
	// how long the server keeps a silent relay's slot busy, which delays
	// the next leader's takeover; zero (the default) keeps the server's
	// setting.
	WALSenderTimeout time.Duration
	// NoFailoverSlot creates the slot, when the relay creates it, without
	// failover = true. By default it is a failover slot on PostgreSQL 17+,
	// so standbys with sync_replication_slots = on keep a copy and a
	// failover does not lose it. Ignored before 17, and for a slot that
	// exists already (outbox-relay migrate --failover-slot changes that
	// one).
	NoFailoverSlot bool
	// BeforeConnect, when set, is called before every connection the
	// relay opens - its pool, the replication connection, the leader's
	// lock connection, each reconnect - with that connection's own copy
	// of the configuration parsed from URL. It exists for credentials
	// that rotate or expire (a mounted secret re-read, an RDS IAM, Cloud
	// SQL or Entra ID token fetched anew), which a URL fixed at start
	// cannot carry: set cfg.Password (the hosts in cfg.Fallbacks share
	// it), or any other field. It runs on connection paths, so keep it
	// fast or cache what it fetches; it may be called concurrently. An
	// error fails that connect, and the relay retries it as any other
	// connection error. Like pgx's BeforeConnect, it sees *pgconn.Config,
	// which pgx.ConnConfig embeds: for a pool of your own (the inbox's,
	// the outbox writer's) set pgxpool.Config.BeforeConnect to a func
	// calling the same hook with &cc.Config.
	BeforeConnect func(ctx context.Context, cfg *pgconn.Config) error
}

// KafkaConfig is how every Kafka client reaches the brokers: the relay's
// own, and those its tools build, so that TLS and SASL apply to all of
// them alike. It is the publisher's (publisher.KafkaConfig): one
// declaration of the brokers, TLS, SASL, session lifetime and metadata TTL.
type KafkaConfig = publisher.KafkaConfig

// PublishConfig shapes the records and the produce requests: the
// publisher's own settings (publisher.Config, embedded: topics, batches,
// retries, the record format, the idempotent producer), and what the relay
// adds around them: the poison policy and the delivery guarantee.
type PublishConfig struct {
	publisher.Config
	// PoisonPolicy decides what a poison event, one Kafka rejects for good
	// or that cannot become a record, does: poison.Quarantine (the
	// default) dead-letters it and parks its aggregate's later events
	// until an operator retries or discards it (outbox-relay dlq), while
	// other aggregates flow on; poison.Halt stops the relay with the slot
	// position held.
	PoisonPolicy poison.Policy
	// Delivery is the delivery guarantee into Kafka: AtLeastOnce (the
	// default) or ExactlyOnce, which writes in Kafka transactions
	// together with the source position, so consumers reading
	// read_committed see each event once (docs/exactly-once.md).
	Delivery Delivery
	// TransactionInterval is how long an exactly-once Kafka transaction
	// collects events before it commits. Events that arrive while a
	// transaction commits form the next one, which commits as soon as
	// the previous commit returned once it is this old: the default, 1ms,
	// is group commit, where a record waits for about one commit before
	// read_committed consumers see it, and busy streams commit large
	// transactions by themselves. Longer means fewer, larger commits
	// (each a few round trips to the transaction coordinator and a
	// marker per partition) and that much more latency; Kafka Streams
	// commits every 100ms.
	TransactionInterval time.Duration
	// TransactionTimeout is the transaction.timeout.ms the relay asks
	// for: the coordinator aborts a transaction left open this long (a
	// relay that died mid-transaction), which unblocks read_committed
	// consumers if no standby takes over first. It must not exceed the
	// brokers' transaction.max.timeout.ms (15 min by default).
	TransactionTimeout time.Duration
	// TransactionalID names the relay's transactional producer; every
	// replica of the same slot must use the same one, so a new leader's
	// InitProducerId fences the old. Empty: derived from the Source,
	// "outbox-relay-<system id>-<database>-<slot>" (Config.TransactionalID).
	TransactionalID string
	// PositionsTopic is the compacted topic where each exactly-once
	// transaction records the source position it covers, keyed by the
	// Source (Source.PositionKey); several relays may share it.
	PositionsTopic string
}

// TransactionalID is the transactional id of the exactly-once producer of
// src: Publish.TransactionalID, or "outbox-relay-<system id>-<database>-<slot>"
// when it is empty. Every replica of the slot (and a promoted standby,
// which keeps the system identifier) shares it, so each new leader fences
// the old; relays of other clusters or databases on the same Kafka
// cluster never share it, even on the default slot name.
func (c Config) TransactionalID(src Source) string {
	if id := c.Publish.TransactionalID; id != "" {
		return id
	}
	return "outbox-relay-" + src.SystemID + "-" + src.Database + "-" + src.Slot
}

// Delivery is a delivery guarantee into Kafka (PublishConfig.Delivery).
type Delivery string

const (
	// AtLeastOnce re-sends, after a crash or a failover, what Kafka may
	// already hold: consumers deduplicate (inbox does, on event_id).
	AtLeastOnce Delivery = "at-least-once"
	// ExactlyOnce writes in Kafka transactions, each with the position it
	// covers; consumers reading read_committed see every event once.
	ExactlyOnce Delivery = "exactly-once"
)

// WindowConfig bounds the events read from the WAL and not yet
// acknowledged by Kafka. The relay stops reading while the window is full,
// so a slow Kafka costs WAL on the server, never memory in the relay.
type WindowConfig struct {
	// MaxEvents and MaxBytes bound the unacknowledged events.
	MaxEvents int
	MaxBytes  int64
	// StallTimeout is how long events may wait in flight with no
	// acknowledgement before the relay reports a stall (logged, the
	// outbox_relay_stalled gauge, Readiness not ready); negative never
	// reports one.
	StallTimeout time.Duration
}

// LeaderConfig configures the election: every replica runs the relay, the
// one holding the slot's advisory lock streams, the others stand by.
type LeaderConfig struct {
	// PollInterval is how often a standby tries to take the lock; it
	// bounds the takeover after a leader stops.
	PollInterval time.Duration
	// KeepaliveInterval is how often the leader checks its lock
	// connection.
	KeepaliveInterval time.Duration
	// Timeout bounds silence on the lock connection: a leader unable to
	// confirm its lock for half of it stops streaming, and PostgreSQL
	// frees the lock of a session silent this long.
	Timeout time.Duration
}

// CheckpointConfig configures the saved acknowledged positions, which let
// a restart skip what Kafka acknowledged already and let recover and
// replay find where to start.
type CheckpointConfig struct {
	// Interval is the cadence of saves; negative disables checkpoints.
	Interval time.Duration
	// Retention is how long the history is kept; keep it at least the
	// outbox rows' retention. Negative keeps it all.
	Retention time.Duration
}

// CleanupConfig is the leader's optional cleanup schedule: it deletes
// outbox rows a checkpoint shows relayed and older than OlderThan.
type CleanupConfig struct {
	// OlderThan is the rows' minimum age; zero (the default) or negative
	// turns the schedule off.
	OlderThan time.Duration
	// Interval is the cadence of runs, each bounded by half of it.
	Interval time.Duration
}

// StatsConfig configures the PostgreSQL statistics every replica scrapes
// (standbys too: with the leader gone they still report the growing lag).
type StatsConfig struct {
	// Interval is the scrape cadence of the slot and outbox-table
	// statistics; negative turns them off.
	Interval time.Duration
	// WALDiskBudget is the WAL bytes the slot may retain before the disk
	// is at risk (zero, the default: none); the exhaustion forecast aims
	// at the smaller of it and safe_wal_size.
	WALDiskBudget int64
}

// DefaultConfig returns the defaults of every knob, the values a zero
// field stands for (and the binary's flag defaults). Database.URL and
// Kafka.Brokers are left to the caller.
func DefaultConfig() Config {
	return Config{
		Database: DatabaseConfig{
			Slot: "outbox_relay", Publication: "outbox_relay", Table: "public.outbox",
			StatusInterval: time.Second, HeartbeatInterval: 10 * time.Second, SlotCheckInterval: 10 * time.Second,
		},
		Kafka: KafkaConfig{MetadataTTL: time.Second},
		Publish: PublishConfig{
			Config:       publisher.DefaultConfig(),
			PoisonPolicy: poison.Quarantine, Delivery: AtLeastOnce, TransactionInterval: time.Millisecond, TransactionTimeout: time.Minute,
			PositionsTopic: "__outbox_relay_positions",
		},
		Window:          WindowConfig{MaxEvents: 10000, MaxBytes: 16 << 20, StallTimeout: time.Minute},
		Leader:          LeaderConfig{PollInterval: 2 * time.Second, KeepaliveInterval: time.Second, Timeout: 10 * time.Second},
		Checkpoints:     CheckpointConfig{Interval: time.Second, Retention: 7 * 24 * time.Hour},
		Cleanup:         CleanupConfig{Interval: 10 * time.Minute},
		Stats:           StatsConfig{Interval: 15 * time.Second},
		ShutdownTimeout: 30 * time.Second,
	}
}

// withDefaults is c with every zero field set to its default.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	def(&c.Database.Slot, d.Database.Slot)
	def(&c.Database.Publication, d.Database.Publication)
	def(&c.Database.Table, d.Database.Table)
	def(&c.Database.StatusInterval, d.Database.StatusInterval)
	def(&c.Database.HeartbeatInterval, d.Database.HeartbeatInterval)
	def(&c.Database.SlotCheckInterval, d.Database.SlotCheckInterval)
	def(&c.Kafka.MetadataTTL, d.Kafka.MetadataTTL)
	p, dp := &c.Publish, d.Publish
	p.Config = p.Config.WithDefaults()
	def(&p.PoisonPolicy, dp.PoisonPolicy)
	def(&p.Delivery, dp.Delivery)
	def(&p.TransactionInterval, dp.TransactionInterval)
	def(&p.TransactionTimeout, dp.TransactionTimeout)
	def(&p.PositionsTopic, dp.PositionsTopic)
	def(&c.Window.MaxEvents, d.Window.MaxEvents)
	def(&c.Window.MaxBytes, d.Window.MaxBytes)
	def(&c.Window.StallTimeout, d.Window.StallTimeout)
	def(&c.Leader.PollInterval, d.Leader.PollInterval)
	def(&c.Leader.KeepaliveInterval, d.Leader.KeepaliveInterval)
	def(&c.Leader.Timeout, d.Leader.Timeout)
	def(&c.Checkpoints.Interval, d.Checkpoints.Interval)
	def(&c.Checkpoints.Retention, d.Checkpoints.Retention)
	def(&c.Cleanup.Interval, d.Cleanup.Interval)
	def(&c.Stats.Interval, d.Stats.Interval)
	def(&c.ShutdownTimeout, d.ShutdownTimeout)
	return c
}

// def sets *v to d when it is the zero value.
func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
