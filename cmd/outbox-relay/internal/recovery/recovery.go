// Package recovery recreates a missing or invalidated (wal_status = lost)
// slot without losing events: it creates a new slot with an exported
// snapshot and back-fills from the outbox table every event committed
// since the last checkpoint that the new slot will not deliver (header
// outbox_replay=recover). The boundary is exact at the new slot (its
// snapshot sees exactly what committed before its consistent point) and
// conservative at the checkpoint (a few events before it are re-sent).
// The binary's recover command runs it, then streams with package relay.
package recovery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// Config configures a recovery.
type Config struct {
	// DatabaseURL is the PostgreSQL URL (a pool and replication
	// connections are opened from it).
	DatabaseURL string
	// ReplicationURL is the hot standby the relay decodes from
	// (relay.DatabaseConfig.ReplicationURL); empty: DatabaseURL. The new
	// slot and its snapshot are the standby's, so the back-fill reads
	// the outbox table there; everything written (dead letters, the
	// checkpoint) goes to DatabaseURL, the primary.
	ReplicationURL string
	// BeforeConnect sets each connection's credentials
	// (relay.DatabaseConfig.BeforeConnect); nil leaves the URL's.
	BeforeConnect func(ctx context.Context, cfg *pgconn.Config) error
	// Outbox is the table, slot and publication to recover.
	Outbox outboxdb.Outbox
	// Policy is the poison policy of the back-fill's publisher.
	Policy poison.Policy
	// Publisher configures the back-fill's publisher (its DeadLetters is
	// set here).
	Publish kafkaclients.Publish
	// CheckpointRetention bounds the history the saved checkpoint joins.
	CheckpointRetention time.Duration
	// Since back-fills events committed since then instead of since the
	// checkpoint; All back-fills every row still in the table. Zero and
	// false: since the newest checkpoint's fence.
	Since time.Time
	All   bool
	// Out receives the report lines, Progress the back-fill's progress.
	Out      io.Writer
	Progress func(backfill.Stats)
	Log      *slog.Logger
}

// replOpts are the replication connections' options.
func (c Config) replOpts() []replication.Option {
	return []replication.Option{replication.WithBeforeConnect(c.BeforeConnect)} // nil: none
}

// replicationURL is the server the slot lives on and is decoded from.
func (c Config) replicationURL() string {
	if c.ReplicationURL != "" {
		return c.ReplicationURL
	}
	return c.DatabaseURL
}

// connect opens a pool on url with the configured credentials.
func (c Config) connect(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pc, err := outboxdb.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	outboxdb.SetBeforeConnect(pc, c.BeforeConnect)
	return outboxdb.ConnectRetrying(ctx, pc, c.Log)
}

// Run recovers the slot and returns once the back-fill is acknowledged and
// a checkpoint at the new slot's consistent point is saved: streaming from
// the slot then continues exactly where the back-fill ended.
func Run(ctx context.Context, cfg Config) error {
	pool, err := cfg.connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// snapshots is where the new slot's snapshot is imported: the
	// server the slot is created on.
	snapshots, slotCfg := pool, slot.Config{Name: cfg.Outbox.Slot, NoFailover: !cfg.Outbox.FailoverSlot}
	if cfg.ReplicationURL != "" {
		if snapshots, err = cfg.connect(ctx, cfg.ReplicationURL); err != nil {
			return fmt.Errorf("the standby of the replication URL: %w", err)
		}
		defer snapshots.Close()
		cfg.Outbox.SlotDB, slotCfg.Primary = snapshots, pool
	}
	checked, err := cfg.Outbox.Check(ctx, pool, cfg.Log)
	if err != nil {
		return err
	}
	if err := cfg.dropLostSlot(ctx, checked.Slots); err != nil {
		return err
	}
	commitTS, err := backfill.CommitTimestamps(ctx, pool)
	if err != nil {
		return err
	}
	checkpoints := checked.Checkpoints
	id, w, desc, foreign, err := cfg.plan(ctx, checkpoints, commitTS)
	if err != nil {
		return err
	}
	// Captured before the slot exists, so its LSN is at or before the
	// consistent point: valid for the checkpoint saved there.
	fence, err := checkpoint.CaptureFence(ctx, pool)
	if err != nil {
		return err
	}
	repl, err := replication.Connect(ctx, cfg.replicationURL(), cfg.replOpts()...)
	if err != nil {
		return err
	}
	ex, err := slot.CreateExported(ctx, repl, slotCfg)
	if err != nil {
		repl.Close(context.Background())
		return err
	}
	cfg.Log.Info("slot created", slog.String("stage", "recover"), slog.String("slot", cfg.Outbox.Slot), slog.String("consistent_point", ex.ConsistentPoint.String()))
	n, err := cfg.backfillSlot(ctx, snapshots, repl, checked.Schema, checked.DeadLetters, ex, w, commitTS, desc)
	if err != nil {
		// Drop the new slot, so that running recover again redoes the
		// back-fill from the same start instead of finding a healthy slot.
		if derr := dropWhenInactive(checked.Slots); derr != nil {
			cfg.Log.Error("could not drop the new slot; drop it (outbox-relay slot drop) before running recover again", slog.String("stage", "recover"), slog.Any("error", derr))
		}
		return err
	}
	if foreign {
		if _, err := checkpoints.Reset(ctx); err != nil {
			return err
		}
	}
	if err := checkpoints.Save(ctx, checkpoint.Checkpoint{LSN: ex.ConsistentPoint, Identity: id, Fence: &fence}, cfg.CheckpointRetention); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "recovered slot %s: back-filled %d events committed before %s; streaming resumes there\n", cfg.Outbox.Slot, n, ex.ConsistentPoint)
	return nil
}

// dropLostSlot makes way for the new slot: nothing to do for a missing
// one, an invalidated one (lost, or on a standby conflicting) is
// dropped, a healthy one is refused.
func (cfg Config) dropLostSlot(ctx context.Context, mgr *slot.Manager) error {
	st, err := mgr.Status(ctx)
	switch {
	case errors.Is(err, slot.ErrSlotNotFound):
		cfg.Log.Warn("slot is missing; recreating it", slog.String("stage", "recover"), slog.String("slot", cfg.Outbox.Slot))
		return nil
	case err != nil:
		return err
	case st.LostError() != nil:
		if st.Active {
			return &slot.ActiveError{Slot: cfg.Outbox.Slot, PID: st.ActivePID}
		}
		cfg.Log.Warn("slot is invalidated; dropping and recreating it", slog.String("stage", "recover"), slog.String("slot", cfg.Outbox.Slot),
			slog.String("wal_status", st.WALStatus), slog.Bool("conflicting", st.Conflicting), slog.String("invalidation_reason", st.InvalidationReason))
		return mgr.Drop(ctx)
	default:
		return fmt.Errorf("slot %q exists and is healthy (wal_status = %s): nothing to recover; use \"outbox-relay replay\" to re-publish events", cfg.Outbox.Slot, st.WALStatus)
	}
}

// plan identifies the server on a short-lived replication connection and
// picks the back-fill selection (selection), reading the timeline history there
// when the checkpoint is of an earlier timeline.
func (cfg Config) plan(ctx context.Context, checkpoints *checkpoint.Store, commitTS bool) (checkpoint.Identity, backfill.Selection, string, bool, error) {
	conn, err := replication.Connect(ctx, cfg.replicationURL(), cfg.replOpts()...)
	if err != nil {
		return checkpoint.Identity{}, backfill.Selection{}, "", false, err
	}
	defer conn.Close(context.Background())
	id, _, err := checkpoint.Identify(ctx, conn)
	if err != nil {
		return id, backfill.Selection{}, "", false, err
	}
	trace := func(cp checkpoint.Checkpoint) (checkpoint.Lineage, error) { return cp.Trace(ctx, conn, id) }
	w, desc, foreign, err := selection(ctx, checkpoints, id, trace, cfg.Since, cfg.All, commitTS)
	return id, w, desc, foreign, err
}

// selection picks the back-fill's lower bound: the newest checkpoint's
// fence, or --since / --all. trace relates a checkpoint to the server
// (Checkpoint.Trace). foreign reports a checkpoint of another cluster, or
// of a timeline the server's does not descend from, replaced after the
// back-fill. A checkpoint of an ancestor timeline (a promoted standby of
// the same cluster) bounds the back-fill like one of the server's own
// timeline when its fence is within the WAL the timelines share: the
// standby replayed the transactions before it with the same xids, and
// every later one, of either timeline, has a larger xid. Its rows stay,
// as history of the cluster.
func selection(ctx context.Context, checkpoints *checkpoint.Store, id checkpoint.Identity, trace func(checkpoint.Checkpoint) (checkpoint.Lineage, error),
	since time.Time, all, commitTS bool) (backfill.Selection, string, bool, error) {
	var w backfill.Selection
	if all {
		return w, "every row in the table", false, nil
	}
	cp, err := checkpoints.Latest(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		return w, "", false, err
	}
	var lin checkpoint.Lineage
	var refused error // a *MismatchError
	if err == nil {
		var mismatch *checkpoint.MismatchError
		if lin, refused = trace(cp); refused != nil && !errors.As(refused, &mismatch) {
			return w, "", false, refused
		}
	}
	foreign := refused != nil
	if !since.IsZero() {
		t := since
		w.Since = t
		f, ok, err := checkpoints.FenceBeforeTime(ctx, id, t)
		switch {
		case err != nil:
			return w, "", false, err
		case ok:
			w.FromXid = &f.Xmin
			return w, fmt.Sprintf("since %s (xid >= %d)", t.Format(time.RFC3339), f.Xmin), foreign, nil
		case commitTS:
			return w, fmt.Sprintf("since %s (commit timestamps)", t.Format(time.RFC3339)), foreign, nil
		}
		return w, "", false, fmt.Errorf("no checkpoint history before %s on %s and track_commit_timestamp is off: use --all", t.Format(time.RFC3339), id)
	}
	if errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		return w, "", false, fmt.Errorf("%w: pass --since TIME (when the slot was last healthy) or --all", err)
	}
	if refused != nil {
		return w, "", false, fmt.Errorf("%w (pass --since TIME or --all to choose the back-fill start yourself)", refused)
	}
	if cp.Fence == nil {
		return w, "", false, fmt.Errorf("checkpoint at %s has no fence (saved before the relay captured one): pass --since TIME or --all", cp.LSN)
	}
	if !lin.Shares(cp.Fence.LSN) {
		return w, "", false, fmt.Errorf("checkpoint at %s was saved on timeline %d, which this server's timeline %d shares only up to %s, "+
			"and its fence at %s is past that, so its xid bound does not hold here: pass --since TIME or --all", cp.LSN, lin.Timeline, id.Timeline, lin.End, cp.Fence.LSN)
	}
	w.FromXid = &cp.Fence.Xmin
	desc := fmt.Sprintf("since checkpoint %s (xid >= %d, fence at %s)", cp.LSN, cp.Fence.Xmin, cp.Fence.LSN)
	if lin.Ancestor {
		desc += fmt.Sprintf(", saved on timeline %d, which this server's timeline %d descends from (it ended at %s)", lin.Timeline, id.Timeline, lin.End)
	}
	return w, desc, false, nil
}

// backfillSlot imports the slot's snapshot in a transaction on pool (the
// server that created the slot), holds the slot on repl (the
// connection that created it, closed at the end) while it publishes the
// window, and returns the number of events taken care of.
func (cfg Config) backfillSlot(ctx context.Context, pool *pgxpool.Pool, repl *pgconn.PgConn, schema migrations.Schema, dl *deadletter.Store, ex slot.Exported, w backfill.Selection, commitTS bool, desc string) (int64, error) {
	log := cfg.Log
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		repl.Close(context.Background())
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+ex.Snapshot+"'"); err != nil {
		repl.Close(context.Background())
		return 0, fmt.Errorf("import the slot's snapshot: %w", err)
	}
	// The snapshot is imported; the creating connection may now hold the
	// slot (its next command ends the export, which no longer matters).
	holdCtx, stopHold := context.WithCancel(context.Background())
	held := make(chan error, 1)
	go func() {
		held <- slot.Hold(holdCtx, repl, ex.Name, replication.PluginArgs(cfg.Outbox.Publication), ex.ConsistentPoint)
		repl.Close(context.Background())
	}()
	defer func() {
		stopHold()
		if err := <-held; err != nil {
			log.Warn("holding the slot failed", slog.String("stage", "recover"), slog.Any("error", err))
		}
	}()

	quar, err := deadletter.NewQueue(ctx, dl, cfg.Policy, log)
	if err != nil {
		return 0, err
	}
	// Just before the slot's first transaction in dead-letter order.
	src := &backfill.Source{Table: cfg.Outbox.Table, Schema: schema, CommitTS: commitTS, Mark: "recover", Pos: ex.ConsistentPoint - 1}
	total, err := src.Count(ctx, tx, w)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(cfg.Out, "recover %s: back-filling %d events %s, up to the new slot's consistent point %s\n", cfg.Outbox.Table, total, desc, ex.ConsistentPoint)
	pub := cfg.Publish.Publisher(publisher.WithDeadLetters(quar), publisher.WithLogger(log))
	defer pub.Close()
	r := &backfill.Runner{Source: src, Pub: pub, Progress: cfg.Progress}
	st, err := r.Run(ctx, tx, w, total)
	if err != nil {
		return st.Acked, fmt.Errorf("back-fill stopped after %d of %d events: %w", st.Acked, total, err)
	}
	fmt.Fprintf(cfg.Out, "back-filled %d events in %s (%.0f/s)\n", st.Acked, st.Elapsed.Round(time.Millisecond), st.Rate())
	return st.Acked, nil
}

// dropWhenInactive drops the slot once the holding connection is gone.
func dropWhenInactive(m *slot.Manager) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		st, err := m.Status(ctx)
		if errors.Is(err, slot.ErrSlotNotFound) {
			return nil
		}
		if err == nil && !st.Active {
			return m.Drop(ctx)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slot still active: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
