package pgstats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/walforecast"
)

// DefaultWindow is the span of samples the growth rate is fitted over
// (walforecast.DefaultWindow).
const DefaultWindow = walforecast.DefaultWindow

// DB is the subset of pgxpool.Pool the collector needs.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config says what to watch and how often.
type Config struct {
	// Slot is the replication slot's name (label slot).
	Slot string
	// SlotDB is the server the slot lives on, when not the collector's
	// (a hot standby the relay decodes from); its lag is measured from
	// what it has replayed.
	SlotDB DB
	// Table is the outbox table, as a SQL identifier (quoted, possibly
	// schema-qualified) for to_regclass; TableLabel is its label value.
	Table      string
	TableLabel string
	// Interval is the scrape cadence; Run does nothing when it is <= 0.
	Interval time.Duration
	// QueryTimeout bounds each query (default: the interval, at most 5 s).
	QueryTimeout time.Duration
	// DiskBudget is the bytes of WAL the slot may retain (0: no budget);
	// the forecast aims at the smaller of it and safe_wal_size.
	DiskBudget int64
	// Window is the growth-rate window (default DefaultWindow).
	Window time.Duration
}

// Collector scrapes the statistics into metrics.PGStats.
type Collector struct {
	db   DB
	cfg  Config
	m    metrics.PGStats
	log  *slog.Logger
	hist walforecast.History
	// lastWarn rate-limits the warning for a failing scrape.
	lastWarn time.Time
}

// New returns a collector; call Run to start it.
func New(db DB, cfg Config, m metrics.PGStats, log *slog.Logger) *Collector {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.QueryTimeout <= 0 {
		cfg.QueryTimeout = min(max(cfg.Interval, time.Second), 5*time.Second)
	}
	return &Collector{db: db, cfg: cfg, m: m, log: log.With(slog.String("stage", "pg_stats")), hist: walforecast.History{Window: cfg.Window}}
}

// Run scrapes at once, then every Interval, until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	if c.cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.Scrape(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scrape reads the slot and the table once and updates the gauges. It
// returns the errors (already counted and logged) for tests.
func (c *Collector) Scrape(ctx context.Context, now time.Time) error {
	errSlot := errors.Join(c.scrapeSlot(ctx, now), c.scrapeReplayLag(ctx))
	errTable := c.scrapeTable(ctx)
	for _, e := range []struct {
		source string
		err    error
	}{{metrics.SourceSlot, errSlot}, {metrics.SourceTable, errTable}} {
		if e.err == nil || ctx.Err() != nil {
			continue
		}
		c.m.ScrapeErrors.WithLabelValues(e.source).Inc()
		level := slog.LevelDebug
		if now.Sub(c.lastWarn) >= time.Minute {
			level, c.lastWarn = slog.LevelWarn, now
		}
		c.log.LogAttrs(ctx, level, "PostgreSQL statistics query failed; the relay goes on",
			slog.String("source", e.source), slog.Any("error", e.err))
	}
	return errors.Join(errSlot, errTable)
}

// currentLSN is the server's WAL position: where a primary writes, or up
// to where a standby has replayed (pg_current_wal_lsn() fails in
// recovery).
const currentLSN = `(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)`

// slotRow is one read of the slot.
type slotRow struct {
	active    bool
	walStatus *string
	safe      *int64
	lag       *int64
	retained  *int64
}

func (c *Collector) scrapeSlot(ctx context.Context, now time.Time) error {
	qctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	var r slotRow
	db := c.db
	if c.cfg.SlotDB != nil {
		db = c.cfg.SlotDB
	}
	err := db.QueryRow(qctx, `
		SELECT active, wal_status, safe_wal_size,
		       pg_wal_lsn_diff(`+currentLSN+`, confirmed_flush_lsn)::bigint,
		       pg_wal_lsn_diff(`+currentLSN+`, restart_lsn)::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, c.cfg.Slot).
		Scan(&r.active, &r.walStatus, &r.safe, &r.lag, &r.retained)
	slot := c.cfg.Slot
	if errors.Is(err, pgx.ErrNoRows) {
		c.m.SlotExists.WithLabelValues(slot).Set(0)
		c.clearSlot()
		c.hist.Reset()
		return nil
	}
	if err != nil {
		return fmt.Errorf("read slot %q: %w", slot, err)
	}
	c.m.SlotExists.WithLabelValues(slot).Set(1)
	c.m.SlotActive.WithLabelValues(slot).Set(b2f(r.active))
	setOrDelete(c.m.SlotLag, slot, r.lag)
	setOrDelete(c.m.SlotRetainedWAL, slot, r.retained)
	setOrDelete(c.m.SlotSafeWALSize, slot, r.safe)
	status := ""
	if r.walStatus != nil {
		status = *r.walStatus
	}
	for _, s := range metrics.WALStatuses {
		c.m.SlotWALStatus.WithLabelValues(slot, s).Set(b2f(s == status))
	}

	exhaustion := c.m.SlotWALExhaustion.WithLabelValues(slot)
	switch {
	case status == "lost":
		c.hist.Reset()
		exhaustion.Set(0)
	case r.retained == nil: // no restart_lsn: nothing retained, nothing to forecast
		c.hist.Reset()
		c.m.SlotWALExhaustion.DeleteLabelValues(slot)
	default:
		samples := c.hist.Add(walforecast.Sample{At: now, Retained: *r.retained})
		if secs, ok := walforecast.Forecast(samples, walforecast.Limits{SafeWALSize: r.safe, DiskBudget: c.cfg.DiskBudget}); ok {
			exhaustion.Set(secs)
		} else {
			c.m.SlotWALExhaustion.DeleteLabelValues(slot)
		}
	}
	return nil
}

// scrapeReplayLag reads, when the slot lives on a standby, how far its
// replay is behind the primary: pg_current_wal_lsn() there minus
// pg_last_wal_replay_lsn() here, read one after the other (the gap between
// the two reads only adds to it).
func (c *Collector) scrapeReplayLag(ctx context.Context) error {
	if c.cfg.SlotDB == nil {
		return nil
	}
	qctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	var replayed *string
	if err := c.cfg.SlotDB.QueryRow(qctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn()::text END`).Scan(&replayed); err != nil {
		return fmt.Errorf("read the standby's replay position: %w", err)
	}
	if replayed == nil { // not a standby (promoted): no replay to wait for
		c.m.StandbyReplayLag.DeleteLabelValues(c.cfg.Slot)
		return nil
	}
	var lag int64
	if err := c.db.QueryRow(qctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, *replayed).Scan(&lag); err != nil {
		return fmt.Errorf("read the primary's position: %w", err)
	}
	c.m.StandbyReplayLag.WithLabelValues(c.cfg.Slot).Set(float64(max(lag, 0)))
	return nil
}

// clearSlot removes the series of a slot that no longer exists: its
// numbers would be stale, and slot_exists = 0 says why they are gone.
func (c *Collector) clearSlot() {
	slot := c.cfg.Slot
	for _, g := range []*prometheus.GaugeVec{c.m.SlotActive, c.m.SlotLag, c.m.SlotRetainedWAL, c.m.SlotSafeWALSize, c.m.SlotWALExhaustion} {
		g.DeleteLabelValues(slot)
	}
	for _, s := range metrics.WALStatuses {
		c.m.SlotWALStatus.DeleteLabelValues(slot, s)
	}
}

func (c *Collector) scrapeTable(ctx context.Context) error {
	qctx, cancel := context.WithTimeout(ctx, c.cfg.QueryTimeout)
	defer cancel()
	var size, live, dead *int64
	var vacuumed *float64
	err := c.db.QueryRow(qctx, `
		SELECT pg_total_relation_size(t.oid), s.n_live_tup, s.n_dead_tup, extract(epoch FROM s.last_autovacuum)::float8
		FROM (SELECT to_regclass($1) AS oid) t
		LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid
		WHERE t.oid IS NOT NULL`, c.cfg.Table).
		Scan(&size, &live, &dead, &vacuumed)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("outbox table %s does not exist", c.cfg.Table)
	}
	if err != nil {
		return fmt.Errorf("read table statistics of %s: %w", c.cfg.Table, err)
	}
	l := c.cfg.TableLabel
	setOrDelete(c.m.TableBytes, l, size)
	setOrDelete(c.m.TableLiveTuples, l, live)
	setOrDelete(c.m.TableDeadTuples, l, dead)
	if vacuumed != nil && !math.IsNaN(*vacuumed) {
		c.m.TableLastAutovacuum.WithLabelValues(l).Set(*vacuumed)
	} else {
		c.m.TableLastAutovacuum.DeleteLabelValues(l)
	}
	return nil
}

func setOrDelete(g *prometheus.GaugeVec, label string, v *int64) {
	if v == nil {
		g.DeleteLabelValues(label)
		return
	}
	g.WithLabelValues(label).Set(float64(*v))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
