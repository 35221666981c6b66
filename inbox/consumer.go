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
	// record from its headers (record.DetectFormat).
	RecordFormat record.Format
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
	var errs []error
	if cfg.Name == "" || len(cfg.Name) > 200 {
		errs = append(errs, errors.New("inbox: Name is required (1-200 characters); it keys processed_events"))
	}
	if cfg.GroupID == "" {
		cfg.GroupID = cfg.Name
	}
	if len(cfg.Brokers) == 0 {
		errs = append(errs, errors.New("inbox: Brokers is required"))
	}
	if len(cfg.Topics) == 0 {
		errs = append(errs, errors.New("inbox: Topics is required"))
	}
	if cfg.Pool == nil {
		errs = append(errs, errors.New("inbox: Pool is required"))
	}
	if (cfg.Handler == nil) == (cfg.BatchHandler == nil) {
		errs = append(errs, errors.New("inbox: exactly one of Handler and BatchHandler is required"))
	}
	if cfg.Schema == "" {
		cfg.Schema = "public"
	}
	if err := validIdent(cfg.Schema); err != nil {
		errs = append(errs, fmt.Errorf("inbox: Schema %w", err))
	}
	if p, err := poison.ParsePolicy(string(cfg.Policy)); err != nil {
		errs = append(errs, fmt.Errorf("inbox: %w", err))
	} else {
		cfg.Policy = p
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.BackoffBase, 100*time.Millisecond)
	def(&cfg.BackoffMax, 5*time.Second)
	def(&cfg.CommitInterval, time.Second)
	def(&cfg.PruneInterval, time.Hour)
	def(&cfg.ShutdownTimeout, 10*time.Second)
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.CommitBatch == 0 {
		cfg.CommitBatch = 1000
	}
	if cfg.BatchSize == 0 {
		cfg.BatchSize = 500
	}
	def(&cfg.BatchLinger, 5*time.Millisecond)
	if cfg.Concurrency == 0 && cfg.Pool != nil {
		cfg.Concurrency = int(cfg.Pool.Config().MaxConns)
	}
	if cfg.StartOffset == 0 {
		cfg.StartOffset = kafka.FirstOffset
	}
	if cfg.MaxAttempts < 1 || cfg.CommitBatch < 1 || cfg.BatchSize < 1 || cfg.BatchSize > maxBatchSize || (cfg.Concurrency < 1 && cfg.Pool != nil) {
		errs = append(errs, fmt.Errorf("inbox: MaxAttempts (%d), CommitBatch (%d) and Concurrency (%d) must be at least 1, BatchSize (%d) 1 to %d",
			cfg.MaxAttempts, cfg.CommitBatch, cfg.Concurrency, cfg.BatchSize, maxBatchSize))
	}
	if cfg.BackoffBase < 0 || cfg.BackoffMax < cfg.BackoffBase || cfg.CommitInterval < 0 || cfg.PruneInterval < 0 || cfg.BatchLinger < 0 {
		errs = append(errs, errors.New("inbox: durations must be positive and BackoffBase <= BackoffMax"))
	}
	if err := CheckRetention(cfg.Retention, cfg.ReplayWindow); err != nil {
		errs = append(errs, err)
	}
	if f, err := parseRecordFormat(cfg.RecordFormat); err != nil {
		errs = append(errs, err)
	} else {
		cfg.RecordFormat = f
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, store: newStore(cfg.Pool, cfg.Schema, cfg.Name), log: slog.New(slog.DiscardHandler), sem: make(chan struct{}, cfg.Concurrency)}
	if o.logger != nil {
		c.log = o.logger.With(slog.String("consumer", cfg.Name))
	}
	c.m = forConsumer(o.metrics, cfg.Name)
	c.tr = newTracing(o, cfg.GroupID)
	return c, nil
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
		return errors.New("inbox: ReplayWindow must not be negative")
	case retention <= 0:
		return nil
	case replayWindow == 0:
		return fmt.Errorf("inbox: Retention %s needs ReplayWindow: set it to the longest time after which an event can be delivered again "+
			"(the topics' retention.ms if offsets may be reset to the earliest)", retention)
	case retention < replayWindow:
		return fmt.Errorf("inbox: Retention %s is shorter than ReplayWindow %s: an event redelivered after its processed_events row "+
			"was deleted would be applied twice; raise Retention to at least %s", retention, replayWindow, replayWindow)
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
