package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/leader"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

func cmdRun(ctx context.Context, args []string, stderr io.Writer) error {
	cfg, err := parse("run",
		"Streams outbox inserts from the replication slot to Kafka (acks=all, keyed by aggregate_id,\n"+
			"murmur2 partitioning) and confirms the slot only past events Kafka acknowledged.\n"+
			"SIGTERM stops reading, waits up to --shutdown-timeout for in-flight acks, confirms and exits 0.",
		args, scopeDB|scopeKafka|scopeRun, stderr)
	if err != nil {
		return err
	}
	return newRelay(cfg, newLogger(cfg, stderr)).run(ctx)
}

// newRelay sets up the process for streaming and returns its relay: the
// one construction path of `run` and of `recover` (which streams after its
// back-fill), so both warn about insecure settings, apply --max-procs and
// run the cleanup schedule alike.
func newRelay(cfg *config, log *slog.Logger) *relay {
	cfg.warnInsecure(log, true)
	log.Info("Go scheduler", slog.String("stage", "startup"), slog.Int("gomaxprocs", applyMaxProcs(cfg.MaxProcs)))
	r := &relay{cfg: cfg, log: log, m: metrics.New()}
	r.cleanup = newCleanupSchedule(r)
	r.stalls = newStallWatch(cfg.StallTimeout, log, r.m, &r.failures)
	return r
}

// relay is one `outbox-relay run` process: start-up checks, then stream
// attempts until SIGTERM or a permanent failure.
type relay struct {
	cfg     *config
	log     *slog.Logger
	m       *metrics.Relay
	pool    *pgxpool.Pool
	slots   *slot.Manager
	quar    *deadletter.Queue
	tracker atomic.Pointer[checkpoint.Tracker]
	// positions holds the saved checkpoints (skip-ahead, recover, replay).
	positions *checkpoint.Store
	// cleanup is the leader's cleanup schedule (nil: off).
	cleanup *cleanupSchedule
	elector *leader.Elector
	// streaming is true while a replication stream runs (for /readyz).
	streaming atomic.Bool
	// decoded is the highest position handed to the publisher (redelivery.go).
	decoded decodedMark
	// failures is the last publish failure of any stream's publisher, and
	// stalls the stall detection fed from it and the window (stallwatch.go).
	failures publisher.LastFailure
	stalls   *stallWatch
	// decodeFails bounds the reconnects on one undecodable message.
	decodeFails decodeRetries
}

// permanentError stops the relay with exit code 1 instead of reconnecting.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

func (r *relay) run(ctx context.Context) error {
	el, err := leader.NewElector(r.cfg.leaderConfig(), r.log)
	if err != nil {
		return configError{err}
	}
	r.elector = el // before the health endpoints read it
	if r.cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", r.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w (set --metrics-addr to a free address, or empty to disable)", r.cfg.MetricsAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", r.m.Handler())
		if r.cfg.PProf {
			mux.HandleFunc("/debug/pprof/", pprof.Index)
			mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		mux.HandleFunc("/healthz", r.healthz)
		mux.HandleFunc("/readyz", r.readyz)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		r.log.Info("serving /metrics, /healthz, /readyz", slog.String("stage", "startup"), slog.String("addr", ln.Addr().String()))
	}

	pool, err := connectPool(ctx, r.cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	r.pool = pool
	if err := slot.CheckServer(ctx, pool, r.log); err != nil {
		return err
	}
	if _, err := migrations.Validate(ctx, pool, r.cfg.table); err != nil {
		return explainStartupSchema(ctx, pool, r.cfg.Publication, r.cfg.table, err)
	}
	defer r.startStats(ctx)()
	r.slots = slot.NewManager(pool, r.cfg.Slot, r.cfg.Publication)
	if err := r.slots.EnsurePublication(ctx, r.cfg.table.Quoted(), r.cfg.table.Schema, r.cfg.table.Name); err != nil {
		return err
	}
	r.positions = checkpoint.NewStore(pool, r.cfg.table, r.cfg.Slot)
	if err := r.positions.Check(ctx); err != nil {
		return err
	}
	if err := r.refuseLostSlot(ctx); err != nil {
		return err
	}
	st, err := r.slots.Ensure(ctx)
	var active *slot.ActiveError
	if err != nil && !errors.As(err, &active) {
		return err
	}
	// An active slot is usually the leader's: the stream checks it again,
	// as leader, and fails then if another kind of client holds it.
	store := deadletter.NewStore(pool, r.cfg.table)
	if err := store.Check(ctx); err != nil {
		return err
	}
	if r.quar, err = deadletter.NewQueue(ctx, store, r.cfg.policy, r.log); err != nil {
		return err
	}
	r.quar.OnPark = r.m.Parked.Inc
	r.quar.OnDead = r.m.DeadLettered.Inc
	r.log.Info("slot ready", slog.String("stage", "startup"), slog.String("slot", st.Name), slog.String("confirmed_flush_lsn", st.ConfirmedFlushLSN.String()), slog.Int64("lag_bytes", st.LagBytes), slog.String("wal_status", st.WALStatus))

	if up, err := r.waitForKafka(ctx); err != nil {
		r.log.Error("stopping: kafka refused the connection, no retry can fix it", slog.String("stage", "kafka_connect"), slog.Any("error", withHint(err)))
		return err
	} else if !up {
		return nil // stopped before Kafka answered
	}
	go r.observe(ctx)

	// Standby until the lock is ours, lead until SIGTERM or a lost lock;
	// after a loss the relay is a standby again (no restart needed).
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

// errLeadershipLost ends lead when the lease ends before SIGTERM.
var errLeadershipLost = errors.New("leadership lost")

// lead streams while lease holds: stream attempts with reconnects, as
// before leader election, plus the WAL heartbeat. Losing the lease cancels
// the stream at once (nothing more is drained or published).
func (r *relay) lead(ctx context.Context, lease *leader.Lease) error {
	lctx := lease.Context()
	hctx, cancel := context.WithCancel(lctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	go r.heartbeat(hctx)
	go r.cleanup.run(hctx, r)

	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := r.stream(ctx, lctx)
		if err == nil || ctx.Err() != nil && !isPermanent(err) {
			r.log.Info("stopped", slog.String("stage", "shutdown"))
			return nil
		}
		if lctx.Err() != nil {
			return errLeadershipLost
		}
		var fence *fenceError
		if errors.As(err, &fence) {
			// A former leader's walsender still holds the slot; the server
			// ends it within its wal_sender_timeout. Poll, don't back off.
			r.log.Info("waiting for the former leader's walsender to release the slot", slog.String("stage", "leader"), slog.Int64("pid", int64(fence.pid)))
			if !backoff.Sleep(hctx, r.cfg.LeaderPollInterval) {
				if lctx.Err() != nil && ctx.Err() == nil {
					return errLeadershipLost
				}
				return nil
			}
			attempt = 0
			continue
		}
		if isPermanent(err) {
			r.log.Error("stopping: permanent failure, slot position held", slog.String("stage", "stream"), slog.Any("error", withHint(err)))
			return err
		}
		if time.Since(started) > time.Minute {
			attempt = 1
		}
		d := backoff.Jitter(attempt, 200*time.Millisecond, r.cfg.BackoffMax)
		r.log.Warn("replication stream ended, reconnecting", slog.String("stage", "stream"), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !backoff.Sleep(hctx, d) {
			if lctx.Err() != nil && ctx.Err() == nil {
				return errLeadershipLost
			}
			return nil
		}
	}
}

// fenceError is a slot still held by a relay's walsender (a former leader
// or our own previous connection): it ends by itself, so the new leader
// waits instead of failing.
type fenceError struct {
	pid int32
	err error
}

func (e *fenceError) Error() string { return e.err.Error() }
func (e *fenceError) Unwrap() error { return e.err }

// fence classifies an active slot: held by a relay's walsender, the leader
// waits for it (the slot's one-consumer rule is what keeps a stale leader
// from streaming on); held by any other client, the relay stops, as
// without leader election.
func (r *relay) fence(ctx context.Context, active *slot.ActiveError) error {
	var app string
	err := r.pool.QueryRow(ctx, `SELECT coalesce(application_name, '') FROM pg_stat_activity WHERE pid = $1`, active.PID).Scan(&app)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && app == replication.ApplicationName {
		return &fenceError{pid: active.PID, err: active}
	}
	if err != nil {
		return fmt.Errorf("%w (and its application_name could not be read: %v)", active, err)
	}
	return permanentError{active}
}

func isPermanent(err error) bool {
	var pe permanentError
	return errors.As(err, &pe)
}

// stream runs one replication connection with a fresh tracker and
// publisher, from the slot's confirmed_flush_lsn. Anything in flight from
// an earlier attempt was not confirmed and is redelivered.
//
// lctx is the leadership: its end cancels the stream at once, while ctx
// (SIGTERM) drains it.
func (r *relay) stream(ctx, lctx context.Context) error {
	// Start-up queries end with either context.
	sctx, scancel := context.WithCancel(lctx)
	defer scancel()
	defer context.AfterFunc(ctx, scancel)()
	st, err := r.slots.Status(sctx)
	if err != nil {
		if errors.Is(err, slot.ErrNotFound) {
			return permanentError{fmt.Errorf("%w: it was dropped while the relay ran; events after its last position may be missing", err)}
		}
		return err
	}
	if err := r.slots.Check(sctx, st); err != nil {
		var active *slot.ActiveError
		if errors.As(err, &active) {
			return r.fence(sctx, active) // likely our previous connection, or the former leader's, still closing
		}
		return permanentError{err}
	}
	// Resume exactly at the slot's confirmed position: an earlier LSN is
	// moved forward by the server anyway, a later one would skip events.
	start := st.ConfirmedFlushLSN

	var params map[string]string
	if r.cfg.WALSenderTimeout > 0 {
		params = map[string]string{"wal_sender_timeout": strconv.FormatInt(r.cfg.WALSenderTimeout.Milliseconds(), 10)}
	}
	conn, err := replication.ConnectParams(sctx, r.cfg.DatabaseURL, params)
	if err != nil {
		return err
	}
	defer func() {
		// Bounded: a cut network must not hold up the return to standby.
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	resume, err := r.resume(ctx, conn, st)
	if err != nil {
		if unfixable(err) { // e.g. a role without REPLICATION: reconnecting cannot help
			return permanentError{err}
		}
		return err
	}

	// The quarantine is what the table says now: while this process was a
	// standby or reconnecting, another leader may have quarantined
	// aggregates, and an operator may have lifted others.
	if err := r.quar.Reload(sctx); err != nil {
		return err
	}
	r.m.Quarantined.Set(float64(r.quar.Quarantined()))
	// Resolved per stream: the stream recognises the outbox by it under
	// any name (a renamed outbox stops the relay instead of being skipped).
	oid, err := r.outboxOID(sctx)
	if err != nil {
		return err
	}

	tracker := checkpoint.New(start, checkpoint.Limits{MaxEvents: r.cfg.MaxInflightEvents, MaxBytes: r.cfg.MaxInflightBytes})
	r.tracker.Store(tracker)
	pub := publisher.New(publisher.Config{
		Brokers: r.cfg.brokers, Template: r.cfg.template,
		MaxBatch: r.cfg.MaxBatch, MaxBatchBytes: r.cfg.MaxBatchBytes, Linger: r.cfg.Linger,
		BackoffBase: r.cfg.BackoffBase, BackoffMax: r.cfg.BackoffMax,
		CreateTopics: r.cfg.CreateTopics, TopicPartitions: r.cfg.TopicPartitions, TopicReplicationFactor: r.cfg.TopicReplication,
		MetadataTTL: r.cfg.MetadataTTL, UnknownTopicTimeout: r.cfg.UnknownTopicWait,
		MetadataRefresh: r.cfg.PartitionRefresh, TopicIdleTimeout: r.cfg.TopicIdleTimeout,
		DeadLetters: r.quar, Security: r.cfg.kafkaSecurity, LastFailure: &r.failures,
	}, r.log, r.m.Publisher())
	defer pub.Close()

	// A permanent publish failure, an invalidated slot or lost leadership
	// cancels the stream; SIGTERM drains it.
	streamCtx, cancel := context.WithCancel(lctx)
	defer cancel()
	sink := &sink{ctx: streamCtx, tracker: tracker, pub: pub, m: r.m, skip: resume.skipper(r.log, r.m),
		redo: newRedelivery(resume.prevDecoded(), r.decoded.load(), r.log, r.m), decoded: &r.decoded}
	var progress replication.Progress = tracker
	if r.cfg.testStatusHold > 0 {
		progress = newHeldProgress(tracker, r.cfg.testStatusHold)
	}
	s := replication.NewStream(conn, replication.Config{
		Slot: r.cfg.Slot, Publication: r.cfg.Publication,
		Namespace: r.cfg.table.Schema, Table: r.cfg.table.Name,
		TableOID: oid, CurrentName: r.currentName,
		StatusInterval: r.cfg.StatusInterval,
	}, sink, progress, r.log)
	stopSaver := r.startSaver(resume, tracker)
	defer stopSaver()
	s.OnStatus(func(flush pglogrepl.LSN) {
		r.m.StatusUpdates.Inc()
		r.m.ConfirmedLSN.Set(float64(flush))
		r.m.LastStatusTime.SetToCurrentTime()
	})
	if err := s.Start(sctx, start); err != nil {
		return err
	}
	r.m.ReplicationStarts.Inc()
	r.m.ReplicationUp.Set(1)
	defer r.m.ReplicationUp.Set(0)
	r.streaming.Store(true)
	defer r.streaming.Store(false)
	r.log.Info("streaming", slog.String("stage", "stream"), slog.String("start_lsn", start.String()))

	var fatal atomic.Pointer[error]
	setFatal := func(err error) {
		fatal.CompareAndSwap(nil, &err)
		cancel()
	}
	go func() {
		select {
		case err := <-pub.Fatal():
			setFatal(err)
		case <-streamCtx.Done():
		}
	}()
	go r.watchSlot(streamCtx, setFatal)
	stop := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			close(stop)
		case <-streamCtx.Done():
		}
	}()
	idle := func() bool { return tracker.Stats().Events == 0 }
	err = s.Run(streamCtx, stop, r.cfg.ShutdownTimeout, idle)
	cancel()
	stopSaver()
	if f := fatal.Load(); f != nil {
		return permanentError{*f}
	}
	err = r.classifyStreamErr(err)
	if err == nil {
		r.log.Info("final status sent", slog.String("stage", "shutdown"), slog.String("confirmed_flush_lsn", tracker.Flushed().String()))
	}
	return err
}

// sink connects the stream to the tracker and the publisher.
type sink struct {
	ctx     context.Context
	tracker *checkpoint.Tracker
	pub     *publisher.Publisher
	m       *metrics.Relay
	tx      *checkpoint.Txn
	events  int // in tx
	// skip drops transactions a checkpoint says Kafka acknowledged already.
	skip *skipper
	// redo counts re-published events; decoded marks what was handed to
	// the publisher, published the events of tx that were.
	redo      *redelivery
	decoded   *decodedMark
	published int
}

func (s *sink) Begin(b replication.Begin) error {
	s.tx = s.tracker.BeginTx(b.CommitTime, b.Xid, b.FinalLSN)
	s.events, s.published = 0, 0
	s.skip.begin(b)
	s.redo.begin(b)
	return nil
}

func (s *sink) Insert(ev *replication.Event) error {
	s.m.DecodedEvents.Inc()
	s.events++
	if s.skip.skipping(ev.Ordinal) {
		return nil // acknowledged before the crash: not published again
	}
	size := ev.Size()
	seq := s.tracker.TrackOrdinal(s.tx, ev.Ordinal, size)
	if err := s.pub.Publish(s.ctx, ev, sizedAck{s.tx, seq, size}); err != nil {
		// Free its window share so the drain before stopping can finish;
		// it is not acknowledged, so neither the slot nor a checkpoint's
		// partial passes it.
		s.tx.Release(size)
		return err
	}
	s.published++
	s.redo.published()
	return nil
}

func (s *sink) Commit(c replication.Commit) error {
	if s.events > 0 {
		s.m.CommitToDecode.Observe(time.Since(s.tx.CommitTime).Seconds())
	}
	s.tracker.Commit(s.tx, c.EndLSN)
	if s.published > 0 {
		s.decoded.advance(c.EndLSN)
	}
	s.tx = nil
	return nil
}

// sizedAck releases an event's window share; the publisher's own size
// accounting differs (it counts Kafka framing), the tracker's must not.
// The Seq tells the tracker which event it is, for the acknowledged prefix.
type sizedAck struct {
	tx   *checkpoint.Txn
	seq  checkpoint.Seq
	size int
}

func (a sizedAck) Ack(int) { a.tx.AckSeq(a.seq, a.size) }

// watchSlot re-reads the slot while streaming: a slot invalidated by
// max_slot_wal_keep_size or dropped can never deliver the WAL it lost, and
// streaming on would hide that events may be missing.
func (r *relay) watchSlot(ctx context.Context, fail func(error)) {
	t := time.NewTicker(r.cfg.SlotCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := r.slots.Status(ctx)
		switch {
		case errors.Is(err, slot.ErrNotFound):
			fail(fmt.Errorf("%w: it was dropped while the relay ran; events after its last position may be missing", err))
			return
		case err != nil:
			r.log.Debug("slot check failed", slog.String("stage", "slot_check"), slog.Any("error", err))
		case st.LostError() != nil:
			fail(st.LostError())
			return
		default:
			if r.quar != nil {
				r.m.Quarantined.Set(float64(r.quar.Quarantined()))
			}
		}
	}
}

// waitForKafka retries until a broker answers, so a relay started before
// Kafka waits instead of crash-looping. It returns false on shutdown, and
// an error for a failure no retry can cure (a certificate that does not
// verify, wrong credentials).
func (r *relay) waitForKafka(ctx context.Context) (bool, error) {
	pub := publisher.New(publisher.Config{Brokers: r.cfg.brokers, Template: r.cfg.template, Security: r.cfg.kafkaSecurity}, r.log, r.m.Publisher())
	defer pub.Close()
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Ping(pctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				r.log.Info("kafka reachable", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt))
			}
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if unfixable(err) {
			return false, permanentError{err}
		}
		d := backoff.Jitter(attempt, 500*time.Millisecond, 30*time.Second)
		r.log.Warn("kafka unreachable, retrying", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !backoff.Sleep(ctx, d) {
			return false, nil
		}
	}
}

// heartbeat writes a tiny non-transactional logical message now and then.
// It reaches the relay through the slot; with nothing in flight the
// relay confirms its position, so an idle outbox never pins WAL.
func (r *relay) heartbeat(ctx context.Context) {
	if r.cfg.HeartbeatInterval <= 0 {
		return
	}
	t := time.NewTicker(r.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.pool.Exec(hctx, `SELECT pg_logical_emit_message(false, $1, '')`, replication.HeartbeatPrefix)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.log.Debug("heartbeat failed", slog.String("stage", "heartbeat"), slog.Any("error", err))
		}
	}
}

// observe copies the window's state into gauges.
func (r *relay) observe(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tr := r.tracker.Load()
		if tr == nil {
			continue
		}
		s := tr.Stats()
		if r.streaming.Load() {
			r.stalls.observe(time.Now(), s)
		} else {
			r.stalls.observe(time.Now(), checkpoint.Stats{})
		}
		r.m.InflightEvents.Set(float64(s.Events))
		r.m.InflightBytes.Set(float64(s.Bytes))
		if s.OldestCommit.IsZero() {
			r.m.OldestUnackedAge.Set(0)
		} else {
			r.m.OldestUnackedAge.Set(time.Since(s.OldestCommit).Seconds())
		}
	}
}
