package relay

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgstats"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// The relay's background loops are startstop services, each started and
// stopped - which waits for its goroutine to return - by its owner:
//
//   - Run: the statistics collector (from the database check on, before
//     the pool closes) and the observer (once Kafka answered);
//   - lead, per leadership term: the WAL heartbeat and the cleanup
//     schedule;
//   - stream, per replication connection: the checkpoint saver (its final
//     save included);
//   - drive, while the stream runs: the watchers of the publisher's fatal
//     failures, of the slot, and of the end of Run's context.
//
// No owner returns while a loop it started still runs, so nothing of the
// relay touches the database or Kafka after Run returns, and the pool
// closes with no query of a loop in flight. It also rules out two
// heartbeats (or cleanup schedules) side by side: neither after losing and
// regaining leadership within one Run, nor when a service restarts the
// relay in-process with a new Relay once Run returned.
type services struct {
	// stats and observer are Run's.
	stats, observer *startstop.Service
	// heartbeat and cleanup are lead's: they run while this process leads.
	heartbeat, cleanup *startstop.Service
}

func newServices(r *Relay) services {
	return services{
		stats:     startstop.New(r.collectStats),
		observer:  startstop.New(r.observe),
		heartbeat: startstop.New(r.heartbeat),
		cleanup:   startstop.New(func(ctx context.Context) { r.cleanup.run(ctx, r) }),
	}
}

// collectStats runs the statistics collector on the relay's pool until ctx
// ends. It starts before the relay waits for Kafka or the leader lock:
// while Kafka is down or another process leads, these gauges are what
// shows the slot's growing lag and the time left.
func (r *Relay) collectStats(ctx context.Context) {
	defer r.loopExit("stats")
	pgstats.New(r.pool, pgstats.Config{
		SlotDB: r.slotDB, Slot: r.cfg.Database.Slot, Table: r.c.table.Quoted(), TableLabel: r.c.table.String(),
		Interval: r.cfg.Stats.Interval, DiskBudget: r.cfg.Stats.WALDiskBudget,
	}, r.m.PG, r.log).Run(ctx)
}

// loopExit calls the relay's loop-exit hook, when a test set one
// (export_test.go): a test makes one loop linger there, so that if its
// owner did not wait for it, it would still be running when Run returns.
// Every loop defers it.
func (r *Relay) loopExit(loop string) {
	if r.loopExitHook != nil {
		r.loopExitHook(loop)
	}
}

// every calls f every d until ctx ends or f returns false.
func every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}
