package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/cleanup"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
)

// cleanupSchedule runs cleanup while this process leads.
type cleanupSchedule struct {
	cfg CleanupConfig
	m   *metrics.Cleanup
}

// newCleanupSchedule returns the schedule of r's configuration, nil when off.
func newCleanupSchedule(r *Relay) *cleanupSchedule {
	c := r.cfg.Cleanup
	if c.OlderThan <= 0 {
		return nil
	}
	if r.cfg.Checkpoints.Interval <= 0 {
		r.log.Warn("Cleanup.OlderThan with checkpoints off (Checkpoints.Interval): no checkpoint is saved, so cleanup deletes nothing", slog.String("stage", "cleanup"))
	}
	if ret := r.cfg.Checkpoints.Retention; ret > 0 && c.OlderThan > ret {
		r.log.Warn("rows older than the checkpoint history can only be replayed with outbox-relay replay --all; keep Checkpoints.Retention >= Cleanup.OlderThan", slog.String("stage", "cleanup"), slog.Duration("cleanup_older_than", c.OlderThan), slog.Duration("checkpoint_retention", ret))
	}
	return &cleanupSchedule{cfg: c, m: metrics.NewCleanup(r.m.Registerer)}
}

// run cleans every interval until ctx (the leadership) ends. A nil
// schedule does nothing.
func (s *cleanupSchedule) run(ctx context.Context, r *Relay) {
	defer r.loopExit("cleanup")
	if s == nil {
		return
	}
	every(ctx, s.cfg.Interval, func() bool {
		s.once(ctx, r)
		return true
	})
}

func (s *cleanupSchedule) once(ctx context.Context, r *Relay) {
	log := r.log.With(slog.String("stage", "cleanup"))
	id, err := outboxdb.Identify(ctx, r.cfg.Database.URL, r.cfg.Database.connectOptions()...)
	if err != nil {
		if ctx.Err() == nil {
			s.m.Runs.WithLabelValues("error").Inc()
			log.Warn("cleanup run failed; retrying at the next interval", slog.Any("error", err))
		}
		return
	}
	c := &cleanup.Cleaner{DB: r.pool, Table: r.c.table, Slot: r.cfg.Database.Slot, Identity: id, Log: log,
		Options:  cleanup.Options{OlderThan: s.cfg.OlderThan, Pause: cleanup.DefaultPause, MaxDuration: max(s.cfg.Interval/2, time.Second)},
		OnDelete: func(n int64) { s.m.DeletedRows.Add(float64(n)) },
	}
	res, err := c.Run(ctx)
	var dropped int64
	for _, d := range res.Dropped {
		dropped += d.Rows
	}
	s.m.DeletedRows.Add(float64(dropped))
	var noCP *cleanup.NoCheckpointError
	var mismatch *checkpoint.MismatchError
	switch {
	case err != nil && ctx.Err() != nil:
		return // leadership ended mid-run: the batch in flight was rolled back
	case errors.As(err, &noCP) || errors.As(err, &mismatch):
		s.m.Runs.WithLabelValues("refused").Inc()
		log.Warn("cleanup refused", slog.Any("error", err))
		return
	case err != nil:
		s.m.Runs.WithLabelValues("error").Inc()
		log.Warn("cleanup run failed; retrying at the next interval", slog.Any("error", err))
		return
	}
	result := "ok"
	if res.Stopped != "" {
		result = "partial"
	}
	s.m.Runs.WithLabelValues(result).Inc()
	log.Info("cleanup run", slog.String("result", result), slog.Int64("rows", res.Deleted), slog.Int("batches", res.Batches), slog.Int("partitions_dropped", len(res.Dropped)), slog.Int64("partition_rows", dropped), slog.Duration("elapsed", res.Elapsed), slog.Int64("wal_bytes", res.WALBytes), slog.Uint64("fence_xid", res.Xid), slog.Any("cutoff", res.Cutoff))
}
