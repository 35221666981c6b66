package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

const recoverSummary = `Recovers from a missing or invalidated (wal_status = lost) slot without losing events:
creates a new slot with an exported snapshot, back-fills from the outbox table every event committed
since the last checkpoint that the new slot will not deliver (header outbox_replay=recover), then
streams like "run". The boundary is exact at the new slot (its snapshot sees exactly what committed
before its consistent point) and conservative at the checkpoint (a few events before it are re-sent).
The slot is held active during the back-fill, so a relay started meanwhile refuses it.
Without a usable checkpoint pass --since TIME or --all.`

func cmdRecover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var since string
	var all, noRun bool
	cfg, rest, err := parseWith("recover", "", recoverSummary, args, scopeDB|scopeKafka|scopeRun, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&since, "since", "", "back-fill events committed since this time (RFC 3339), instead of since the checkpoint")
		fs.BoolVar(&all, "all", false, "back-fill every row still in the table")
		fs.BoolVar(&noRun, "no-run", false, "exit after the back-fill instead of streaming")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 || (since != "" && all) {
		return fmt.Errorf("%w: recover takes no arguments, and at most one of --since and --all", errUsage)
	}
	log := newLogger(cfg, stderr)
	// Set up as `run` is before anything else: the back-fill uses the same
	// Kafka security and scheduler, and streaming follows it.
	r := newRelay(cfg, log)
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := slot.CheckServer(ctx, pool, log); err != nil {
		return err
	}
	schema, err := migrations.Validate(ctx, pool, cfg.table)
	if err != nil {
		return explainStartupSchema(ctx, pool, cfg.Publication, cfg.table, err)
	}
	positions := checkpoint.NewStore(pool, cfg.table, cfg.Slot)
	if err := positions.Check(ctx); err != nil {
		return err
	}
	dl := deadletter.NewStore(pool, cfg.table)
	if err := dl.Check(ctx); err != nil {
		return err
	}
	mgr := slot.NewManager(pool, cfg.Slot, cfg.Publication)
	if err := mgr.EnsurePublication(ctx, cfg.table.Quoted(), cfg.table.Schema, cfg.table.Name); err != nil {
		return err
	}
	st, err := mgr.Status(ctx)
	switch {
	case errors.Is(err, slot.ErrNotFound):
		log.Warn("slot is missing; recreating it", slog.String("stage", "recover"), slog.String("slot", cfg.Slot))
	case err != nil:
		return err
	case st.WALStatus == "lost":
		if st.Active {
			return &slot.ActiveError{Slot: cfg.Slot, PID: st.ActivePID}
		}
		log.Warn("slot is invalidated (wal_status = lost); dropping and recreating it", slog.String("stage", "recover"), slog.String("slot", cfg.Slot))
		if err := mgr.Drop(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("slot %q exists and is healthy (wal_status = %s): nothing to recover; use \"outbox-relay replay\" to re-publish events", cfg.Slot, st.WALStatus)
	}

	id, err := identify(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	commitTS, err := backfill.CommitTimestamps(ctx, pool)
	if err != nil {
		return err
	}
	w, desc, foreign, err := recoverWindow(ctx, positions, id, since, all, commitTS)
	if err != nil {
		return err
	}
	// Captured before the slot exists, so its LSN is at or before the
	// consistent point: valid for the checkpoint saved there.
	fence, err := checkpoint.CaptureFence(ctx, pool)
	if err != nil {
		return err
	}
	repl, err := replication.Connect(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	ex, err := slot.CreateExported(ctx, repl, cfg.Slot)
	if err != nil {
		repl.Close(context.Background())
		return err
	}
	log.Info("slot created", slog.String("stage", "recover"), slog.String("slot", cfg.Slot), slog.String("consistent_point", ex.ConsistentPoint.String()))
	n, err := backfillSlot(ctx, cfg, pool, repl, schema, dl, ex, w, commitTS, desc, stdout, stderr)
	if err != nil {
		// Drop the new slot, so that running recover again redoes the
		// back-fill from the same start instead of finding a healthy slot.
		if derr := dropWhenInactive(mgr); derr != nil {
			log.Error("could not drop the new slot; drop it (outbox-relay slot drop) before running recover again", slog.String("stage", "recover"), slog.Any("error", derr))
		}
		return err
	}
	if foreign {
		if _, err := positions.Reset(ctx); err != nil {
			return err
		}
	}
	if err := positions.Save(ctx, checkpoint.Checkpoint{LSN: ex.ConsistentPoint, Identity: id, Fence: &fence}, cfg.CheckpointRetention); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "recovered slot %s: back-filled %d events committed before %s; streaming resumes there\n", cfg.Slot, n, ex.ConsistentPoint)
	if noRun {
		return nil
	}
	pool.Close() // the relay opens its own
	return r.run(ctx)
}

// recoverWindow picks the back-fill's lower bound: the newest checkpoint's
// fence, or --since / --all. foreign reports a checkpoint of another
// cluster or timeline, replaced after the back-fill.
func recoverWindow(ctx context.Context, positions *checkpoint.Store, id checkpoint.Identity, since string, all, commitTS bool) (backfill.Window, string, bool, error) {
	var w backfill.Window
	if all {
		return w, "every row in the table", false, nil
	}
	cp, err := positions.Latest(ctx)
	if err != nil && !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return w, "", false, err
	}
	foreign := err == nil && cp.Verify(id) != nil
	if since != "" {
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return w, "", false, configError{fmt.Errorf("--since %q: use RFC 3339, e.g. 2026-12-02T18:00:00Z", since)}
		}
		w.Since = t
		f, ok, err := positions.FenceBeforeTime(ctx, id, t)
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
	if errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return w, "", false, fmt.Errorf("%w: pass --since TIME (when the slot was last healthy) or --all", err)
	}
	if verr := cp.Verify(id); verr != nil {
		return w, "", false, fmt.Errorf("%w (pass --since TIME or --all to choose the back-fill start yourself)", verr)
	}
	if cp.Fence == nil {
		return w, "", false, fmt.Errorf("checkpoint at %s has no fence (saved before the relay captured one): pass --since TIME or --all", cp.LSN)
	}
	w.FromXid = &cp.Fence.Xmin
	return w, fmt.Sprintf("since checkpoint %s (xid >= %d, fence at %s)", cp.LSN, cp.Fence.Xmin, cp.Fence.LSN), false, nil
}

// backfillSlot imports the slot's snapshot, holds the slot on repl (the
// connection that created it, closed at the end) while it publishes the
// window, and returns the number of events taken care of.
func backfillSlot(ctx context.Context, cfg *config, pool interface {
	BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
}, repl *pgconn.PgConn, schema migrations.Schema, dl *deadletter.Store, ex slot.Exported, w backfill.Window, commitTS bool, desc string, stdout, stderr io.Writer) (int64, error) {
	log := newLogger(cfg, stderr)
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
		held <- slot.Hold(holdCtx, repl, ex.Name, replication.PluginArgs(cfg.Publication), ex.ConsistentPoint)
		repl.Close(context.Background())
	}()
	defer func() {
		stopHold()
		if err := <-held; err != nil {
			log.Warn("holding the slot failed", slog.String("stage", "recover"), slog.Any("error", err))
		}
	}()

	quar, err := deadletter.NewQueue(ctx, dl, cfg.policy, log)
	if err != nil {
		return 0, err
	}
	// Just before the slot's first transaction in dead-letter order.
	src := &backfill.Source{Table: cfg.table, Schema: schema, CommitTS: commitTS, Mark: "recover", Pos: ex.ConsistentPoint - 1}
	total, err := src.Count(ctx, tx, w)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(stdout, "recover %s: back-filling %d events %s, up to the new slot's consistent point %s\n", cfg.table, total, desc, ex.ConsistentPoint)
	pub := publisher.New(publisher.Config{
		Brokers: cfg.brokers, Template: cfg.template, MaxBatch: cfg.MaxBatch, MaxBatchBytes: cfg.MaxBatchBytes, Linger: cfg.Linger,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax, MetadataTTL: cfg.MetadataTTL,
		CreateTopics: cfg.CreateTopics, TopicPartitions: cfg.TopicPartitions, TopicReplicationFactor: cfg.TopicReplication,
		UnknownTopicTimeout: cfg.UnknownTopicWait, DeadLetters: quar, Security: cfg.kafkaSecurity,
	}, log, nil)
	defer pub.Close()
	r := &backfill.Runner{Source: src, Pub: pub, Progress: progressPrinter(stderr, "recover")}
	st, err := r.Run(ctx, tx, w, total)
	if err != nil {
		return st.Acked, fmt.Errorf("back-fill stopped after %d of %d events: %w", st.Acked, total, err)
	}
	fmt.Fprintf(stdout, "back-filled %d events in %s (%.0f/s)\n", st.Acked, st.Elapsed.Round(time.Millisecond), st.Rate())
	return st.Acked, nil
}

// dropWhenInactive drops the slot once the holding connection is gone.
func dropWhenInactive(m *slot.Manager) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		st, err := m.Status(ctx)
		if errors.Is(err, slot.ErrNotFound) {
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
