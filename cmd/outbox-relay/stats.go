package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgstats"
)

// statsConfig configures the PostgreSQL-side statistics (package pgstats)
// every run process collects, standbys included.
type statsConfig struct {
	// StatsInterval is the scrape cadence of the slot and outbox-table
	// statistics; 0 turns them off.
	StatsInterval time.Duration
	// WALDiskBudget is the WAL bytes the slot may retain before the disk
	// is at risk (0: none); the exhaustion forecast aims at the smaller of
	// it and safe_wal_size.
	WALDiskBudget int64
}

// bindStats registers the statistics flags (run only).
func (c *statsConfig) bindStats(b *flagBinder) {
	b.dur(&c.StatsInterval, "stats-interval", 15*time.Second,
		"cadence of the PostgreSQL statistics metrics (slot lag, retained WAL, exhaustion forecast, outbox table size); 0 disables")
	b.int64(&c.WALDiskBudget, "wal-disk-budget", 0,
		"bytes of WAL the slot may retain on the server's disk, a target for the exhaustion forecast besides safe_wal_size; 0: none")
}

// validateStats checks the statistics flags.
func (c *statsConfig) validateStats() []error {
	var errs []error
	if c.StatsInterval < 0 || c.StatsInterval > 0 && c.StatsInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("--stats-interval %s: use 0 (off) or at least 100ms (15s is plenty for dashboards)", c.StatsInterval))
	}
	if c.WALDiskBudget < 0 {
		errs = append(errs, fmt.Errorf("--wal-disk-budget %d: use 0 (none) or the bytes of WAL the server can hold, e.g. 10737418240 for 10 GiB", c.WALDiskBudget))
	}
	return errs
}

// startStats starts the statistics collector on the relay's pool and
// returns its stop function (call it before the pool closes). It starts
// before the relay waits for Kafka or the leader lock: while Kafka is down
// or another process leads, these gauges are what shows the slot's growing
// lag and the time left.
func (r *relay) startStats(ctx context.Context) (stop func()) {
	if r.cfg.StatsInterval <= 0 {
		return func() {}
	}
	c := pgstats.New(r.pool, pgstats.Config{
		Slot: r.cfg.Slot, Table: r.cfg.table.Quoted(), TableLabel: r.cfg.table.String(),
		Interval: r.cfg.StatsInterval, DiskBudget: r.cfg.WALDiskBudget,
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
