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
)

// Handler applies one event's effect inside tx, the transaction that also
// registers the event in processed_events. Returning an error rolls both
// back: the event is then neither applied nor marked processed. Wrap an
// error with Permanent when retrying cannot help (see ExpectRows).
//
// The handler must not commit or roll back tx, and must not have effects
// outside PostgreSQL that cannot be repeated (an HTTP call, an e-mail): a
// retry or a redelivery before the commit runs it again. Give such calls
// an idempotency key (the event ID) at the receiver.
type Handler func(ctx context.Context, tx pgx.Tx, ev *Event) error

// Policy says what a permanently failing event does to the consumer.
type Policy string

// Policies.
const (
	// PolicyWait dead-letters the event (status dead) and parks every later
	// event of its aggregate (status parked), in arrival order, until an
	// operator runs Retry or Discard; other aggregates go on. The same
	// ordering rule as the relay's quarantine.
	PolicyWait Policy = "wait"
	// PolicyHalt stops Run with a *HaltError before the event's offset.
	PolicyHalt Policy = "halt"
)

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case PolicyWait, PolicyHalt:
		return Policy(s), nil
	}
	return "", fmt.Errorf("inbox policy %q: use wait or halt", s)
}

// Config configures a Consumer. Name, Brokers, Topics, Pool and Handler
// are required; the rest have defaults.
type Config struct {
	// Name identifies the consumer in processed_events and the dead-letter
	// table: two consumers with the same Name share their dedupe. Default
	// Kafka group ID.
	Name string
	// GroupID is the Kafka consumer group; default Name.
	GroupID string
	Brokers []string
	Topics  []string
	// Pool is the consumer's database: the inbox tables and the state the
	// handler changes live there, so one transaction covers both.
	Pool *pgxpool.Pool
	// Schema holds the inbox tables (Migrate); default "public".
	Schema  string
	Handler Handler
	// Policy for permanent failures; default PolicyWait.
	Policy Policy

	// MaxAttempts is how often a failing handler runs before the event is
	// a permanent failure (default 5). Infrastructure failures of
	// PostgreSQL are retried without limit and never count.
	MaxAttempts int
	// BackoffBase and BackoffMax bound the exponential backoff with full
	// jitter between attempts (defaults 100ms, 5s). The consumer processes
	// one event at a time, so every partition waits during the backoff.
	BackoffBase, BackoffMax time.Duration

	// CommitInterval and CommitBatch batch offset commits: the processed
	// offsets are committed every CommitInterval (default 1s) or after
	// CommitBatch events (default 1000), whichever comes first. Larger
	// values mean fewer commits and more redeliveries after a crash (all
	// absorbed).
	CommitInterval time.Duration
	CommitBatch    int

	// Retention, when positive, deletes processed_events rows older than
	// it every PruneInterval (default 1h). It must be at least
	// ReplayWindow: a row deleted while its event can still be redelivered
	// would let the redelivery apply the effect a second time.
	Retention     time.Duration
	ReplayWindow  time.Duration
	PruneInterval time.Duration

	// StartOffset of a group without committed offsets: kafka.FirstOffset
	// (the default: a new consumer sees every retained event) or
	// kafka.LastOffset.
	StartOffset int64
	// ShutdownTimeout bounds the final offset commit when Run stops
	// (default 10s).
	ShutdownTimeout time.Duration
	// TuneReader, if set, may adjust the kafka-go reader configuration
	// (session and rebalance timeouts, fetch sizes) before it is created.
	// GroupID, GroupTopics and CommitInterval are the inbox's.
	TuneReader func(*kafka.ReaderConfig)

	Metrics Metrics      // nil: no metrics; inboxprom.New gives Prometheus collectors
	Logger  *slog.Logger // nil: no logs
}

// Stats are the consumer's counters since New.
type Stats struct {
	Applied      int64 // handler ran and committed
	Duplicates   int64 // redeliveries absorbed (already processed or dead-lettered)
	Parked       int64 // later events of a waiting aggregate, written to the dead-letter table
	DeadLettered int64 // permanent failures written to the dead-letter table
	Retries      int64 // handler attempts after the first, and infrastructure retries
	Commits      int64 // successful offset commits
}

// Consumer reads outbox events from Kafka with a consumer group and applies
// each event's effect once per consumer (see the package documentation).
type Consumer struct {
	cfg   Config
	store *store
	log   *slog.Logger
	m     *consumerMetrics

	applied, duplicates, parked, dead, retries, commits atomic.Int64
}

// New validates cfg and returns a Consumer. It does not connect.
func New(cfg Config) (*Consumer, error) {
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
	if cfg.Handler == nil {
		errs = append(errs, errors.New("inbox: Handler is required"))
	}
	if cfg.Schema == "" {
		cfg.Schema = "public"
	}
	if err := validIdent(cfg.Schema); err != nil {
		errs = append(errs, fmt.Errorf("inbox: Schema %w", err))
	}
	if cfg.Policy == "" {
		cfg.Policy = PolicyWait
	}
	if _, err := ParsePolicy(string(cfg.Policy)); err != nil {
		errs = append(errs, err)
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
	if cfg.StartOffset == 0 {
		cfg.StartOffset = kafka.FirstOffset
	}
	if cfg.MaxAttempts < 1 || cfg.CommitBatch < 1 {
		errs = append(errs, fmt.Errorf("inbox: MaxAttempts (%d) and CommitBatch (%d) must be at least 1", cfg.MaxAttempts, cfg.CommitBatch))
	}
	if cfg.BackoffBase < 0 || cfg.BackoffMax < cfg.BackoffBase || cfg.CommitInterval < 0 || cfg.PruneInterval < 0 {
		errs = append(errs, errors.New("inbox: durations must be positive and BackoffBase <= BackoffMax"))
	}
	if err := CheckRetention(cfg.Retention, cfg.ReplayWindow); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	c := &Consumer{cfg: cfg, store: newStore(cfg.Pool, cfg.Schema, cfg.Name), log: slog.New(slog.DiscardHandler)}
	if cfg.Logger != nil {
		c.log = cfg.Logger.With(slog.String("consumer", cfg.Name))
	}
	c.m = forConsumer(cfg.Metrics, cfg.Name)
	return c, nil
}

// CheckRetention validates a processed_events retention against the replay
// window: the longest time after its first delivery at which an event can
// still be delivered again (the topics' retention if offsets may be reset
// to the earliest, otherwise the longest outage after which the relay or a
// consumer can still redeliver). Zero retention keeps rows forever.
func CheckRetention(retention, replayWindow time.Duration) error {
	switch {
	case retention < 0 || replayWindow < 0:
		return errors.New("inbox: Retention and ReplayWindow must not be negative")
	case retention == 0:
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
		DeadLettered: c.dead.Load(), Retries: c.retries.Load(), Commits: c.commits.Load(),
	}
}

// Run consumes until ctx is done (it then returns nil after committing the
// processed offsets) or a fatal error (a *HaltError under PolicyHalt).
// Offsets are committed only for events whose transaction committed (or
// that were dead-lettered), so a crash at any point causes redelivery,
// never a skipped event.
func (c *Consumer) Run(ctx context.Context) error {
	rc := kafka.ReaderConfig{
		Brokers:               c.cfg.Brokers,
		GroupID:               c.cfg.GroupID,
		GroupTopics:           c.cfg.Topics,
		StartOffset:           c.cfg.StartOffset,
		MinBytes:              1,
		MaxBytes:              8 << 20,
		MaxWait:               500 * time.Millisecond,
		HeartbeatInterval:     time.Second,
		WatchPartitionChanges: true,
		ReadBackoffMin:        100 * time.Millisecond,
		ReadBackoffMax:        time.Second,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) {
			c.log.Warn(fmt.Sprintf(f, a...), slog.String("stage", "kafka"))
		}),
	}
	if c.cfg.TuneReader != nil {
		c.cfg.TuneReader(&rc)
	}
	rc.GroupID, rc.GroupTopics, rc.Topic, rc.Partition = c.cfg.GroupID, c.cfg.Topics, "", 0
	rc.CommitInterval = 0 // synchronous: CommitMessages returns once the broker stored the offsets
	r := kafka.NewReader(rc)

	fctx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	type fetched struct {
		m   kafka.Message
		err error
	}
	msgs := make(chan fetched)
	go func() {
		for {
			m, err := r.FetchMessage(fctx)
			select {
			case msgs <- fetched{m, err}:
			case <-fctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()

	if c.cfg.Retention > 0 {
		go c.pruneLoop(fctx)
	}
	c.log.Info("inbox consumer started", slog.String("stage", "start"), slog.String("group", c.cfg.GroupID), slog.Any("topics", c.cfg.Topics))

	com := newCommitter(r, c)
	tick := time.NewTicker(c.cfg.CommitInterval)
	defer tick.Stop()
	finish := func(err error) error {
		stopFetch()
		cctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
		defer cancel()
		com.flush(cctx)
		if cerr := r.Close(); cerr != nil {
			c.log.Warn("closing the Kafka reader", slog.String("stage", "shutdown"), slog.Any("error", cerr))
		}
		c.log.Info("inbox consumer stopped", slog.String("stage", "shutdown"))
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return finish(nil)
		case <-tick.C:
			com.flush(ctx)
		case f := <-msgs:
			if f.err != nil {
				if ctx.Err() != nil {
					return finish(nil)
				}
				return finish(fmt.Errorf("inbox: fetch: %w", f.err))
			}
			if err := c.process(ctx, f.m); err != nil {
				if ctx.Err() != nil {
					return finish(nil)
				}
				return finish(err)
			}
			com.mark(f.m)
			if com.n >= c.cfg.CommitBatch {
				com.flush(ctx)
			}
		}
	}
}

// outcome of one attempt at an event.
type outcome int

const (
	applied outcome = iota
	duplicate
	parked
)

// process takes one record to a final outcome: applied, absorbed as a
// duplicate, parked, dead-lettered; or returns a *HaltError or ctx's error.
func (c *Consumer) process(ctx context.Context, m kafka.Message) error {
	if m.HighWaterMark > 0 {
		c.m.lag(m.Topic, m.Partition, m.HighWaterMark-m.Offset-1)
	}
	ev, err := Decode(m)
	if err != nil {
		ev.ID = recordID(m.Topic, m.Partition, m.Offset)
		c.m.errors("decode")
		return c.fail(ctx, &ev, err, 0)
	}
	log := c.log.With(slog.String("event_id", ev.ID), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType))
	for attempt, infra := 1, 0; ; {
		start := time.Now()
		out, err := c.once(ctx, &ev)
		if err == nil {
			c.m.processed(time.Since(start), ev.Time)
			switch out {
			case applied:
				c.applied.Add(1)
				c.m.applied()
			case duplicate:
				c.duplicates.Add(1)
				c.m.duplicate()
				log.Debug("duplicate absorbed", slog.String("stage", "dedupe"))
			case parked:
				c.parked.Add(1)
				c.m.parked()
				log.Warn("aggregate is waiting on a dead-lettered event: event parked", slog.String("stage", "park"))
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var se *storeError
		if errors.As(err, &se) && !isTransientPG(err) {
			// The inbox's own SQL failed (tables missing, no privilege): no
			// event is at fault, so none is dead-lettered.
			return fmt.Errorf("inbox: %w (run inbox.Migrate for schema %q and check the role's privileges)", err, c.cfg.Schema)
		}
		var wait time.Duration
		switch {
		case isTransientPG(err) || errors.Is(err, errConnLost):
			c.m.errors("database")
			infra++
			wait = c.backoff(infra)
			log.Warn("database unavailable, retrying", slog.String("stage", "apply"), slog.Int("attempt", attempt), slog.Any("error", err), slog.Duration("backoff", wait))
		case IsPermanent(err) || attempt >= c.cfg.MaxAttempts:
			reason := "handler"
			if IsPermanent(err) {
				reason = "permanent"
			}
			c.m.errors(reason)
			return c.fail(ctx, &ev, err, attempt)
		default:
			c.m.errors("handler")
			wait = c.backoff(attempt)
			log.Warn("handler failed, retrying", slog.String("stage", "apply"), slog.Int("attempt", attempt), slog.Any("error", err), slog.Duration("backoff", wait))
			attempt++
		}
		c.retries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// once runs one transaction for ev: lock the aggregate, skip a known event,
// park it behind a dead-lettered one, or register it and run the handler.
func (c *Consumer) once(ctx context.Context, ev *Event) (outcome, error) {
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return 0, &storeError{"begin", err}
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	known, quarantined, err := c.store.check(ctx, tx, ev)
	if err != nil {
		return 0, &storeError{"check " + ev.ID, err}
	}
	if known {
		return duplicate, nil
	}
	if quarantined {
		if err := c.store.insertDead(ctx, tx, ev, "parked", "aggregate waits on an earlier dead-lettered event", 0); err != nil {
			return 0, &storeError{"park " + ev.ID, err}
		}
		return parked, tx.Commit(ctx)
	}
	fresh, err := c.store.register(ctx, tx, ev)
	if err != nil {
		return 0, &storeError{"register " + ev.ID, err}
	}
	if !fresh {
		return duplicate, nil
	}
	if err := c.cfg.Handler(ctx, tx, ev); err != nil {
		if tx.Conn().IsClosed() && !IsPermanent(err) {
			// The connection died under the handler: not the event's fault.
			return 0, fmt.Errorf("inbox: handler lost its connection: %w (%w)", err, errConnLost)
		}
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("inbox: commit %s: %w", ev.ID, err)
	}
	return applied, nil
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
func (c *Consumer) fail(ctx context.Context, ev *Event, cause error, attempts int) error {
	reason := cause.Error()
	log := c.log.With(slog.String("event_id", ev.ID), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType), slog.Int("attempt", attempts))
	if c.cfg.Policy == PolicyHalt {
		log.Error("event failed permanently; policy is halt", slog.String("stage", "halt"), slog.Any("error", cause))
		return &HaltError{EventID: ev.ID, AggregateID: ev.AggregateID, Reason: reason}
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
