package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/fielderr"
	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// Handler applies one event's effect inside tx, the transaction that also
// registers the event in processed_events. Returning an error rolls both
// back: the event is then neither applied nor marked processed. Wrap an
// error with poison.Permanent when retrying cannot help (see ExpectRows).
//
// The handler must not commit or roll back tx, and must not have effects
// outside PostgreSQL that cannot be repeated (an HTTP call, an e-mail): a
// retry or a redelivery before the commit runs it again. Give such calls
// an idempotency key (the event ID) at the receiver.
type Handler func(ctx context.Context, tx pgx.Tx, ev *record.Event) error

// Config configures a Consumer: what it does. Name, Brokers, Topics, Pool
// and Handler (or BatchHandler) are required. Every other field's zero
// value is its default, so a Config with the required fields alone is a
// complete configuration; a knob that can be turned off is turned off by
// a negative value (0 is the default, -1 off), as each field says. Where
// the logs, metrics and spans go are Options of New.
type Config struct {
	// Name identifies the consumer in processed_events and the dead-letter
	// table: two consumers with the same Name share their dedupe. It is
	// also the default GroupID. Required (1-200 characters).
	Name string
	// GroupID is the Kafka consumer group; default Name.
	GroupID string
	// Brokers are the Kafka bootstrap brokers (host:port). Required.
	Brokers []string
	// Topics are the topics to consume. Required.
	Topics []string
	// Pool is the consumer's database: the inbox tables and the state the
	// handler changes live there, so one transaction covers both.
	// Required.
	Pool *pgxpool.Pool
	// Schema holds the inbox tables (Migrate); default "public".
	Schema string
	// Handler applies one event at a time; BatchHandler applies a batch's
	// events at once. Exactly one of the two is required. Either way the
	// events of a batch share one transaction (see BatchSize).
	Handler      Handler
	BatchHandler BatchHandler
	// Policy is what a permanently failing event does to the consumer
	// (see the package documentation, "Failures"): poison.Quarantine, the
	// default (the zero Policy), dead-letters it and parks the later
	// events of its aggregate; poison.Halt stops Run with a
	// *poison.HaltError before the event's offset.
	Policy poison.Policy

	// BatchSize is the most events of one partition applied in one
	// transaction (default 500). A transaction per batch instead of per
	// event is what makes the inbox keep up with the relay; 1 gives one
	// transaction per event. Memory is bounded by BatchSize times the
	// assigned partitions, whatever the backlog. At most 10000.
	BatchSize int
	// BatchLinger is how long a partition waits for more records after
	// the first one of a batch before it applies a partial batch (default
	// 5ms). A backlog fills batches at once; the linger only adds latency
	// to a trickle. It cannot be negative: BatchSize 1 applies every
	// record as it comes.
	BatchLinger time.Duration
	// Concurrency is how many partitions apply a batch at the same time
	// (default: the pool's MaxConns). Each assigned partition has its own
	// reader and worker, so order within a partition (and so within an
	// aggregate) is kept; this bounds the database connections they hold.
	// At least 1 when set.
	Concurrency int

	// MaxAttempts is how often a failing handler runs before the event is
	// a permanent failure (default 5; 1: no retry). Infrastructure
	// failures of PostgreSQL are retried without limit and never count.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter between attempts (defaults 100ms, 5s; BackoffBase may not
	// exceed BackoffMax). Only the failing event's partition waits during
	// the backoff.
	BackoffBase, BackoffMax time.Duration

	// CommitInterval and CommitBatch batch offset commits: the processed
	// offsets are committed every CommitInterval (default 1s) or after
	// CommitBatch events (default 1000), whichever comes first. Larger
	// values mean fewer commits and more redeliveries after a crash (all
	// absorbed). Neither can be turned off.
	CommitInterval time.Duration
	CommitBatch    int

	// Retention, when positive, deletes processed_events rows older than
	// it every PruneInterval. Off by default: 0 (or a negative value)
	// keeps the rows forever. It must be at least ReplayWindow: a row
	// deleted while its event can still be redelivered would let the
	// redelivery apply the effect a second time (CheckRetention).
	Retention time.Duration
	// ReplayWindow is the longest time after its first delivery at which
	// an event can still be delivered again; required with a Retention,
	// not negative.
	ReplayWindow time.Duration
	// PruneInterval is how often Run deletes the rows past the Retention
	// (default 1h).
	PruneInterval time.Duration

	// StartOffset of a group without committed offsets: kafka.FirstOffset
	// (the default: a new consumer sees every retained event) or
	// kafka.LastOffset (kafka-go's constants, both negative).
	StartOffset int64
	// ShutdownTimeout bounds how long the batches in flight may take to
	// finish when Run stops, before they are cancelled (and roll back)
	// and the final offsets are committed (default 10s). Negative turns
	// the grace off: the batches in flight are cancelled at once, and
	// their events are delivered again after a restart.
	ShutdownTimeout time.Duration
	// RecordFormat is the format of the topics' records (the relay's
	// --record-format); empty (or "auto"), the default, detects it per
	// record from its headers (record.DetectFormat). The registry formats
	// (avro, protobuf, json-schema) carry the native headers: detected,
	// they read as native, their framed values as Schemas says.
	RecordFormat record.Format
	// Schemas is how values in the Confluent wire format (the registry
	// formats') reach the handler: decoded to JSON with the registry's
	// schema (the default, which needs Schemas.Registry with a registry
	// RecordFormat), or raw. Event.SchemaID and Event.Subject say which
	// schema a value was written with.
	Schemas SchemaConfig
	// TuneReader, if set, may adjust the kafka-go configuration before the
	// consumer group and the partition readers are created: the group
	// settings (SessionTimeout, RebalanceTimeout, HeartbeatInterval,
	// JoinGroupBackoff, GroupBalancers, Dialer, StartOffset) go to the
	// kafka.ConsumerGroup, the fetch settings (MinBytes, MaxBytes,
	// MaxWait, ReadBatchTimeout, ReadBackoffMin/Max, IsolationLevel) and
	// the Dialer to each partition's reader (see Transactions in the
	// package documentation; QueueCapacity, MaxAttempts and the loggers
	// do not apply to it). IsolationLevel is kafka.ReadCommitted unless
	// set to kafka.ReadUncommitted here. GroupID, GroupTopics, Topic,
	// Partition and CommitInterval are the inbox's. nil (the default)
	// keeps the inbox's settings.
	TuneReader func(*kafka.ReaderConfig)
}

// Stats are the consumer's counters since New.
type Stats struct {
	Applied      int64 // handler ran and committed
	Duplicates   int64 // redeliveries absorbed (already processed or dead-lettered)
	Parked       int64 // later events of a waiting aggregate, written to the dead-letter table
	DeadLettered int64 // permanent failures written to the dead-letter table
	Retries      int64 // handler attempts after the first, and infrastructure retries
	Commits      int64 // successful offset commits
	Batches      int64 // transactions that committed a batch of events
}

// Consumer reads outbox events from Kafka with a consumer group and applies
// each event's effect once per consumer (see the package documentation).
type Consumer struct {
	cfg   Config
	store *store
	log   *slog.Logger
	m     *consumerMetrics
	tr    *tracing
	// loopExitHook is a test hook (loopExit); nil outside tests.
	loopExitHook func(loop string)

	// reg looks up the schemas of framed values; nil without
	// Schemas.Registry.
	reg schemaLookup

	// sem bounds the transactions in flight (Concurrency).
	sem chan struct{}

	applied, duplicates, parked, dead, retries, commits, batches atomic.Int64
}

// New validates cfg and returns a Consumer. It does not connect. opts say
// where its logs, metrics and spans go (WithLogger, WithMetrics,
// WithTracerProvider, WithPropagator); without them it logs and measures
// nothing and traces with the global OpenTelemetry provider.
func New(cfg Config, opts ...Option) (*Consumer, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := forConsumer(o.metrics, cfg.Name)
	reg, err := newSchemaLookup(cfg.Schemas, m.registry())
	if err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, store: newStore(cfg.Pool, cfg.Schema, cfg.Name), log: slog.New(slog.DiscardHandler), sem: make(chan struct{}, cfg.Concurrency), reg: reg, m: m}
	if o.logger != nil {
		c.log = o.logger.With(slog.String("consumer", cfg.Name))
	}
	c.tr = newTracing(o, cfg.GroupID)
	return c, nil
}

// FieldError is one invalid Config field: its Go path (Field), the
// rejected value (Value, nil when beside the point) and what to do (Err).
// Validate and New join one per problem. It is relay's FieldError too: one
// type, so one errors.As handles every package's configuration errors.
type FieldError = fielderr.Error

// ErrRequired is the Err of a FieldError for a required field left empty.
var ErrRequired = fielderr.ErrRequired

// Validate checks every field of c, with the defaults New gives the fields
// left zero, without any I/O. The error joins one *FieldError per problem;
// each says how to fix it.
func (c Config) Validate() error { return c.withDefaults().validate() }

// withDefaults is c with each zero field set to its default.
func (c Config) withDefaults() Config {
	if c.GroupID == "" {
		c.GroupID = c.Name
	}
	if c.Schema == "" {
		c.Schema = "public"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.BackoffBase, 100*time.Millisecond)
	def(&c.BackoffMax, 5*time.Second)
	def(&c.CommitInterval, time.Second)
	def(&c.PruneInterval, time.Hour)
	def(&c.ShutdownTimeout, 10*time.Second)
	def(&c.BatchLinger, 5*time.Millisecond)
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 5
	}
	if c.CommitBatch == 0 {
		c.CommitBatch = 1000
	}
	if c.BatchSize == 0 {
		c.BatchSize = 500
	}
	if c.Concurrency == 0 && c.Pool != nil {
		c.Concurrency = int(c.Pool.Config().MaxConns)
	}
	if c.StartOffset == 0 {
		c.StartOffset = kafka.FirstOffset
	}
	if p, err := poison.ParsePolicy(string(c.Policy)); err == nil {
		c.Policy = p
	}
	if f, err := parseRecordFormat(c.RecordFormat); err == nil {
		c.RecordFormat = f
	}
	c.Schemas = c.Schemas.withDefaults()
	return c
}

// validate checks c, its defaults set.
func (c Config) validate() error {
	var l fielderr.List
	switch {
	case c.Name == "":
		l.Wrap("Name", fmt.Errorf("%w (1-200 characters; it keys processed_events)", ErrRequired))
	case len(c.Name) > 200:
		l.Fail("Name", nil, "%d characters: use at most 200", len(c.Name))
	}
	if len(c.Brokers) == 0 {
		l.Wrap("Brokers", ErrRequired)
	}
	if len(c.Topics) == 0 {
		l.Wrap("Topics", ErrRequired)
	}
	if c.Pool == nil {
		l.Wrap("Pool", ErrRequired)
	}
	if (c.Handler == nil) == (c.BatchHandler == nil) {
		l.Wrap("Handler", errors.New("set exactly one of Handler and BatchHandler"))
	}
	if err := validIdent(c.Schema); err != nil {
		l.Wrap("Schema", err)
	}
	if _, err := poison.ParsePolicy(string(c.Policy)); err != nil {
		l.Wrap("Policy", err)
	}
	if _, err := parseRecordFormat(c.RecordFormat); err != nil {
		l.Wrap("RecordFormat", err)
	}
	c.validateSchemas(&l)
	for _, n := range []struct {
		field string
		v     int
	}{{"MaxAttempts", c.MaxAttempts}, {"CommitBatch", c.CommitBatch}, {"BatchSize", c.BatchSize}} {
		if n.v < 1 {
			l.Fail(n.field, n.v, "use 1 or more (0: the default)")
		}
	}
	if c.BatchSize > maxBatchSize {
		l.Fail("BatchSize", c.BatchSize, "use at most %d", maxBatchSize)
	}
	if c.Concurrency < 1 && c.Pool != nil {
		l.Fail("Concurrency", c.Concurrency, "use 1 or more (0: the pool's MaxConns)")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"BackoffBase", c.BackoffBase}, {"CommitInterval", c.CommitInterval}, {"PruneInterval", c.PruneInterval}, {"BatchLinger", c.BatchLinger}} {
		if d.v < 0 {
			l.Fail(d.field, d.v, "use a positive duration (0: the default)")
		}
	}
	if c.BackoffMax < c.BackoffBase {
		l.Fail("BackoffMax", c.BackoffMax, "use at least BackoffBase (%s)", c.BackoffBase)
	}
	if err := CheckRetention(c.Retention, c.ReplayWindow); err != nil {
		l = append(l, err)
	}
	return l.Err()
}

// CheckRetention validates a processed_events retention against the replay
// window: the longest time after its first delivery at which an event can
// still be delivered again (the topics' retention if offsets may be reset
// to the earliest, otherwise the longest outage after which the relay or a
// consumer can still redeliver). A retention of zero or less is off: the
// rows are kept forever, whatever the window. The window cannot be
// negative.
func CheckRetention(retention, replayWindow time.Duration) error {
	switch {
	case replayWindow < 0:
		return &FieldError{Field: "ReplayWindow", Value: replayWindow, Err: errors.New("must not be negative")}
	case retention <= 0:
		return nil
	case replayWindow == 0:
		return &FieldError{Field: "Retention", Value: retention, Err: errors.New("needs ReplayWindow: set it to the longest time after which an event can be delivered again " +
			"(the topics' retention.ms if offsets may be reset to the earliest)")}
	case retention < replayWindow:
		return &FieldError{Field: "Retention", Value: retention, Err: fmt.Errorf("is shorter than ReplayWindow %s: an event redelivered after its processed_events row "+
			"was deleted would be applied twice; raise Retention to at least %s", replayWindow, replayWindow)}
	}
	return nil
}

// Stats returns the counters so far.
func (c *Consumer) Stats() Stats {
	return Stats{
		Applied: c.applied.Load(), Duplicates: c.duplicates.Load(), Parked: c.parked.Load(),
		DeadLettered: c.dead.Load(), Retries: c.retries.Load(), Commits: c.commits.Load(), Batches: c.batches.Load(),
	}
}

// storeError is a failure of the inbox's own statements.
type storeError struct {
	op  string
	err error
}

func (e *storeError) Error() string { return e.op + ": " + e.err.Error() }
func (e *storeError) Unwrap() error { return e.err }

// errConnLost marks a handler error caused by a lost connection.
var errConnLost = errors.New("connection lost")

// fail applies the policy to a permanently failed event.
func (c *Consumer) fail(ctx context.Context, ev *record.Event, cause error, attempts int) error {
	reason := cause.Error()
	log := c.log.With(slog.String("event_id", ev.ID), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType), slog.Int("attempt", attempts))
	if c.cfg.Policy == poison.Halt {
		log.Error("event failed permanently; policy is halt", slog.String("stage", "halt"), slog.Any("error", cause))
		return &poison.HaltError{EventID: ev.ID, AggregateID: ev.AggregateID, Reason: reason, Held: "its offset"}
	}
	for n := 1; ; n++ {
		err := c.store.deadLetter(ctx, ev, reason, attempts)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		c.m.errors("database")
		wait := c.backoff(n)
		log.Warn("writing the dead-letter row failed, retrying", slog.String("stage", "dead_letter"), slog.Any("error", err), slog.Duration("backoff", wait))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
	c.dead.Add(1)
	c.m.deadLettered()
	log.Error("event dead-lettered; its aggregate waits until Retry or Discard, other aggregates go on", slog.String("stage", "dead_letter"), slog.Any("error", cause))
	return nil
}

// backoff is exponential with full jitter, capped at BackoffMax.
func (c *Consumer) backoff(attempt int) time.Duration {
	return backoff.Jitter(attempt, c.cfg.BackoffBase, c.cfg.BackoffMax)
}

// pruneLoop deletes processed_events rows past the retention.
func (c *Consumer) pruneLoop(ctx context.Context) {
	defer c.loopExit("prune")
	t := time.NewTicker(c.cfg.PruneInterval)
	defer t.Stop()
	for {
		n, err := c.Prune(ctx)
		if err != nil && ctx.Err() == nil {
			c.log.Warn("pruning processed_events failed", slog.String("stage", "prune"), slog.Any("error", err))
		} else if n > 0 {
			c.log.Info("pruned processed_events past the retention", slog.String("stage", "prune"), slog.Int64("rows", n))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Prune deletes this consumer's processed_events rows older than
// Config.Retention now (Run does it every PruneInterval). It does nothing
// without a retention.
func (c *Consumer) Prune(ctx context.Context) (int64, error) {
	if c.cfg.Retention <= 0 {
		return 0, nil
	}
	n, err := c.store.prune(ctx, c.cfg.Retention, 5000)
	c.m.pruned(n)
	return n, err
}
