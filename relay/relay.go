package relay

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/leader"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/slot"
)

// Relay streams one outbox table's inserts from its replication slot to
// Kafka. Every replica of a service runs one for the same slot; the one
// holding the slot's leader lock streams, the others stand by and take
// over within Leader.PollInterval when it stops.
type Relay struct {
	cfg  Config
	c    compiled
	opts options
	log  *slog.Logger
	m    *metrics.Relay
	// loopExitHook is a test hook (loopExit); nil outside tests.
	loopExitHook func(loop string)
	// gatherer serves /metrics (nil: not served; see WithMetrics).
	gatherer prometheus.Gatherer
	elector  *leader.Elector
	// schemas is the registry of a registry record format (nil for the
	// others), shared by every stream's publisher so that its cache
	// outlives a stream restart.
	schemas publisher.Schemas
	running atomic.Bool
	// stopped is why Run returned ("" while it runs or before): Readiness
	// reports it instead of the last role.
	stopped atomic.Pointer[string]

	// Set up by Run before streaming starts.
	pool *pgxpool.Pool
	// slotDB is where the slot lives: the standby of
	// Database.ReplicationURL, or pool.
	slotDB *pgxpool.Pool
	slots  *slot.Manager
	quar   *deadletter.Queue
	// checkpoints holds the saved checkpoints (skip-ahead, recover, replay).
	checkpoints *checkpoint.Store

	tracker atomic.Pointer[checkpoint.Tracker]
	// cleanup is the leader's cleanup schedule (nil: off).
	cleanup *cleanupSchedule
	// loops are the background loops Run and lead start and wait for
	// (services.go).
	loops services
	// streaming is true while a replication stream runs (Readiness).
	streaming atomic.Bool
	// decoded is the highest position handed to the publisher (redelivery.go).
	decoded decodedMark
	// failures is the last publish failure of any stream's publisher, and
	// stalls the stall detection fed from it and the window (stallwatch.go).
	failures lastFailure
	stalls   *stallWatch
	// registryOut is a schema registry outage, for /readyz
	// (registryoutage.go).
	registryOut registryOutage
	// decodeFails bounds the reconnects on one undecodable message.
	decodeFails decodeRetries
}

// New validates cfg and returns a Relay ready to Run. It does no I/O: a
// wrong password or an unreachable broker shows when Run connects. Its
// error joins a *FieldError for each invalid field.
func New(cfg Config, opts ...Option) (*Relay, error) {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	if err := o.testHooks(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Relay{cfg: cfg, c: c, opts: o, log: log}
	if r.elector, err = leader.NewElector(cfg.Leader.elector(cfg.Database), log); err != nil {
		return nil, &FieldError{Field: "Database.URL", Err: err}
	}
	if o.registerer == nil {
		r.m = metrics.New()
		r.gatherer = r.m.Registry
	} else if r.m, err = metrics.Register(o.registerer); err != nil {
		return nil, err
	} else if g, ok := o.registerer.(prometheus.Gatherer); ok {
		r.gatherer = g
	}
	// The registry client reports to the relay's collectors: its
	// requests, cache and stale answers are the first place to look when
	// events wait on the registry (reason schema_registry).
	if r.schemas, err = kafkaclients.Schemas(cfg.Publish.Record, schemareg.WithMetrics(r.m.SchemaRegistryClient())); err != nil {
		return nil, err
	}
	r.cleanup = newCleanupSchedule(r)
	r.loops = newServices(r)
	r.stalls = newStallWatch(cfg.Window.StallTimeout, log, r.m, &r.failures)
	return r, nil
}

// Run checks the database, waits for Kafka, then campaigns for the slot's
// leader lock: as a standby it waits, as the leader it streams, and after
// losing the lock it is a standby again. It returns when ctx ends - after
// draining for at most ShutdownTimeout, with nil - or on a failure no
// reconnect can cure (a schema problem, a lost slot, a poison event under
// poison.Halt, a rejected certificate), with the slot position held. Run
// may be called once. When it returns, every goroutine it started has
// ended: nothing of the relay uses the database or Kafka any more.
func (r *Relay) Run(ctx context.Context) (err error) {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("relay: Run called twice")
	}
	defer func() {
		why := "Run returned: its context ended"
		if err != nil {
			why = "Run returned: " + err.Error()
		}
		r.stopped.Store(&why)
	}()
	// PostgreSQL not reachable yet (starting, restarting) is waited out,
	// as Kafka is below: exiting would only start a crash loop.
	pool, err := outboxdb.ConnectRetrying(ctx, r.c.pool, r.log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before PostgreSQL answered
		}
		return err
	}
	defer pool.Close()
	r.pool, r.slotDB = pool, pool
	if r.c.replPool != nil {
		standby, err := outboxdb.ConnectRetrying(ctx, r.c.replPool, r.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		defer standby.Close()
		r.slotDB = standby
	}
	out := outboxdb.Outbox{Table: r.c.table, Slot: r.cfg.Database.Slot, Publication: r.cfg.Database.Publication,
		FailoverSlot: !r.cfg.Database.NoFailoverSlot, SlotDB: r.slotDB}
	checked, err := out.Check(ctx, pool, r.log)
	if err != nil {
		return stoppedStarting(ctx, err)
	}
	if r.cfg.Stats.Interval > 0 {
		// Stopped (and waited for) before the pool closes.
		r.loops.stats.Start(ctx)
		defer r.loops.stats.Stop()
	}
	r.slots, r.checkpoints = checked.Slots, checked.Checkpoints
	if err := r.refuseLostSlot(ctx); err != nil {
		return stoppedStarting(ctx, err)
	}
	st, err := r.slots.Ensure(ctx)
	var active *slot.ActiveError
	if err != nil && !errors.As(err, &active) {
		return stoppedStarting(ctx, err)
	}
	// An active slot is usually the leader's: the stream checks it again,
	// as leader, and fails then if another kind of client holds it.
	if r.quar, err = deadletter.NewQueue(ctx, checked.DeadLetters, r.c.policy, r.log); err != nil {
		return stoppedStarting(ctx, err)
	}
	r.quar.OnPark = r.m.Parked.Inc
	r.quar.OnDead = r.m.DeadLettered.Inc
	r.log.Info("slot ready", slog.String("stage", "startup"), slog.String("slot", st.Name), slog.String("confirmed_flush_lsn", st.ConfirmedFlushLSN.String()), slog.Int64("lag_bytes", st.LagBytes), slog.String("wal_status", st.WALStatus))

	if up, err := r.waitForKafka(ctx); err != nil {
		r.log.Error("stopping: kafka refused the connection, no retry can fix it", slog.String("stage", "kafka_connect"), slog.Any("error", hint.With(err)))
		return err
	} else if !up {
		return nil // stopped before Kafka answered
	}
	r.loops.observer.Start(ctx)
	defer r.loops.observer.Stop()
	return r.campaign(ctx)
}

// stoppedStarting is err, or nil when err is ctx's end: a stop asked for
// during start-up (SIGTERM before the stream began) is as clean as one
// asked for later, with nothing in flight yet to acknowledge, so it must not
// look like a failure (exit 1) to the process supervisor. Any other error,
// even one that came together with the stop, is returned.
func stoppedStarting(ctx context.Context, err error) error {
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil
	}
	return err
}

// campaign is a standby until the lock is ours, leads until ctx ends or
// the lock is lost; after a loss the relay is a standby again (no restart
// needed).
func (r *Relay) campaign(ctx context.Context) error {
	for {
		lease, err := r.elector.Campaign(ctx)
		if err != nil {
			if ctx.Err() != nil {
				r.log.Info("stopped as standby", slog.String("stage", "shutdown"))
				return nil
			}
			return err
		}
		r.m.LeaderAcquisitions.Inc()
		r.m.Leader.Set(1)
		// The gauge drops the moment the lease ends, when publishing
		// stops, not after the stream's bounded clean-up.
		unwatch := context.AfterFunc(lease.Context(), func() { r.m.Leader.Set(0) })
		err = r.lead(ctx, lease)
		unwatch()
		r.m.Leader.Set(0)
		if rerr := lease.Release(context.Background()); rerr != nil {
			r.log.Debug("releasing the lock failed; closing its session frees it", slog.String("stage", "leader"), slog.Any("error", rerr))
		}
		if !errors.Is(err, errLeadershipLost) {
			return err
		}
		r.log.Warn("stopped streaming after losing the lock; standby again", slog.String("stage", "leader"), slog.Any("error", lease.Err()))
	}
}

// publish is what the relay's publishers are built from (the stream's,
// the probe that waits for Kafka): the one construction every publisher
// of the binary shares (kafkaclients.Publish), with the relay's Kafka
// configuration, its publish settings and its positions topic.
func (r *Relay) publish() kafkaclients.Publish {
	return kafkaclients.Publish{Kafka: r.cfg.Kafka, Config: r.cfg.Publish.Config, PositionsTopic: r.cfg.Publish.PositionsTopic,
		ClientID: "outbox-relay", Recycled: r.recycled, Schemas: r.schemas}
}

// recycled logs a recycle of the Kafka connections before a SASL session
// ends.
func (r *Relay) recycled(end time.Time) {
	r.log.Info("closing Kafka connections before their SASL session ends; the next requests connect and authenticate anew",
		slog.String("stage", "kafka"), slog.Time("session_end", end))
}
