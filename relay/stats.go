package relay

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/pgstats"
)

// startStats starts the statistics collector on the relay's pool and
// returns its stop function (call it before the pool closes). It starts
// before the relay waits for Kafka or the leader lock: while Kafka is down
// or another process leads, these gauges are what shows the slot's growing
// lag and the time left.
func (r *Relay) startStats(ctx context.Context) (stop func()) {
	if r.cfg.Stats.Interval <= 0 {
		return func() {}
	}
	c := pgstats.New(r.pool, pgstats.Config{
		Slot: r.cfg.Database.Slot, Table: r.c.table.Quoted(), TableLabel: r.c.table.String(),
		Interval: r.cfg.Stats.Interval, DiskBudget: r.cfg.Stats.WALDiskBudget,
	}, r.m.PG, r.log)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}
