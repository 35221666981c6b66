package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/fielderr"
	"github.com/outbox-relay/outbox-relay/internal/walforecast"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Querier runs a query that returns one row. *pgxpool.Pool and *pgx.Conn
// satisfy it. The monitor needs nothing else, so it can share the
// application's pool (it holds a connection for a few milliseconds per
// refresh).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DefaultHealthInterval is HealthConfig.Interval's default: often enough
// that a budget is seen within seconds of being crossed, rarely enough
// that the two small queries per refresh cost the database nothing.
const DefaultHealthInterval = 5 * time.Second

// staleAfter is how many intervals a reading stays valid without a
// successful refresh. Past that, nothing is refused (fail open).
const staleAfter = 3

// HealthConfig configures a HealthMonitor: what it reads and the budgets
// it evaluates. Slot is required. Every other field's zero value is its
// default. The limits (DiskBudget and each Budget's) are off by default,
// and a negative limit is off too, the convention of the module's other
// Configs (0 the default, -1 off). Where the logs and metrics go are
// Options of NewHealthMonitor.
type HealthConfig struct {
	// Slot is the relay's replication slot (outbox-relay --slot).
	// Required.
	Slot string
	// Table is the outbox table; the monitor reads the relay's newest
	// checkpoint of Table and Slot (migrations.CheckpointTable) to bound
	// the oldest unacknowledged event's age more tightly. The role needs
	// SELECT on that table. Zero: the checkpoint is not read, and the age
	// comes from the slot alone.
	Table migrations.Table
	// Interval is the refresh cadence (default DefaultHealthInterval; it
	// cannot be turned off or be negative). A reading older than three
	// intervals is stale: it refuses nothing.
	Interval time.Duration
	// Soft is the budget beyond which events of PriorityLow are refused.
	// The zero Budget, the default, refuses nothing.
	Soft Budget
	// Hard is the optional budget beyond which every event is refused,
	// critical ones too: the point where the service would rather stop
	// writing than risk the database's disk. The zero Budget, the
	// default: never.
	Hard Budget
	// DiskBudget is the bytes of WAL the slot may retain, like the
	// relay's --wal-disk-budget: the forecast aims at the smaller of it
	// and safe_wal_size. Set it to the relay's value so both forecasts
	// agree. Off by default: 0 (or a negative value) aims at
	// safe_wal_size only (no forecast when max_slot_wal_keep_size is
	// unlimited).
	DiskBudget int64
}

// Health is one reading of the slot and the relay's progress, the input
// of the budgets.
type Health struct {
	// At is when the reading was taken (zero before the first successful
	// refresh). Older than three intervals: stale, nothing is refused.
	At time.Time
	// RetainedWAL is pg_current_wal_lsn() - restart_lsn: the WAL bytes
	// the slot keeps on the server's disk (0 when it reserves none, e.g.
	// once lost).
	RetainedWAL int64
	// SafeWALSize is pg_replication_slots.safe_wal_size: the bytes that
	// can still be written before max_slot_wal_keep_size invalidates the
	// slot; -1 when unknown (max_slot_wal_keep_size unlimited). Negative
	// beyond -1 once the slot retains more than allowed.
	SafeWALSize int64
	// WALStatus is pg_replication_slots.wal_status: reserved, extended,
	// unreserved or lost.
	WALStatus string
	// Forecast is the time until the retained WAL reaches the nearer of
	// safe_wal_size and HealthConfig.DiskBudget at its growth rate over
	// the last five minutes of this monitor's readings — the algorithm of
	// the relay's outbox_relay_slot_wal_exhaustion_seconds. 0 when a limit
	// is reached; -1 when there is none: no limit, a single reading so far,
	// retained WAL that does not grow, or a lost slot. The relay's metric
	// reads 0 for a lost slot, to alert; here it crosses nothing, because
	// a lost slot retains no WAL and refusing events would protect
	// nothing (outbox-relay recover back-fills from the table).
	Forecast time.Duration
	// OldestUnacked is the age of the oldest event the relay has not had
	// acknowledged by Kafka, as far as can be told without reading the
	// outbox table: the time since the newest moment at which everything
	// written to the WAL was confirmed by the slot (this monitor's own
	// samples of pg_current_wal_lsn() against confirmed_flush_lsn) or
	// acknowledged per the relay's checkpoint (commit_time of the last
	// acknowledged transaction). 0 when the slot has confirmed all WAL;
	// -1 when unknown (no confirmed_flush_lsn).
	//
	// Its bias: it counts all unconfirmed WAL, not only outbox rows, so
	// while the relay is down it grows even if no event is waiting; it is
	// rounded up to the refresh interval (and the relay's confirmation
	// cadence, about a second). The exception is WAL that was already
	// unconfirmed when this monitor started: its age is counted from the
	// monitor's first reading (an underestimate), since nothing cheap
	// tells when it was written. An outage older than the process is
	// therefore seen at once by the retained-WAL and forecast budgets,
	// and by MaxOldestEvent only once it has lasted that long in the
	// process's lifetime.
	OldestUnacked time.Duration
	// Err is the error of the last refresh, nil when it succeeded. The
	// other fields are then the last successful reading's. A failed
	// checkpoint read alone (say, no SELECT privilege) is reported here
	// while the reading stays fresh: only OldestUnacked loses precision.
	Err error
}

// HealthMonitor keeps a cached reading of the relay's slot and evaluates
// the back-pressure budgets on it, so that Writers (WithBackpressure) can
// refuse events before the database's disk fills up, at the cost of an
// atomic load per Append. Create it with NewHealthMonitor, start Run, and
// share it between Writers. Safe for concurrent use.
//
// Each refresh runs two small queries on PostgreSQL itself — the slot's
// row of pg_replication_slots with pg_current_wal_lsn(), and the relay's
// newest checkpoint row (an index lookup) — never a scan of the outbox
// table. It works whether the relay runs or not, which is the point: the
// budgets matter most while the relay is down. Point it at the primary
// (pg_current_wal_lsn() fails on a standby).
type HealthMonitor struct {
	db       Querier
	cfg      HealthConfig
	cpSQL    string // newest checkpoint's commit age; "" without a Table
	cpOutbox string
	log      *slog.Logger
	metrics  Metrics
	timeout  time.Duration
	now      func() time.Time

	state atomic.Pointer[monitorState]

	mu     sync.Mutex // serialises refreshes; guards what follows
	hist   walforecast.History
	clock  walClock
	last   Health // last successful reading
	lastOK time.Time
	fresh  bool // the last published state was fresh
	// staleLogged: a stale reading was logged; the next fresh one says so.
	staleLogged bool
	softOn      bool
	hardOn      bool
	lastWarn    time.Time
}

// monitorState is what Check and Health read: one immutable value per
// refresh, swapped atomically.
type monitorState struct {
	health Health
	soft   *BackpressureError // nil: not engaged
	hard   *BackpressureError
	until  time.Time // the reading is stale after this: refuse nothing
}

// Validate checks every field of c without any I/O. The error joins one
// *FieldError per problem.
func (c HealthConfig) Validate() error {
	var l fielderr.List
	if c.Slot == "" {
		l.Wrap("Slot", ErrRequired)
	}
	if c.Interval < 0 {
		l.Fail("Interval", c.Interval, "use a positive duration (0: DefaultHealthInterval)")
	}
	return l.Err()
}

// NewHealthMonitor returns a monitor of cfg.Slot on db. It reads nothing
// until Run or Refresh; until the first successful refresh nothing is
// refused. The error lists every invalid field.
//
// The options of a HealthMonitor are WithLogger and WithMetrics (give it
// the Metrics of its Writers); the Writer's own options change nothing
// here.
func NewHealthMonitor(db Querier, cfg HealthConfig, opts ...Option) (*HealthMonitor, error) {
	var errs []error
	if db == nil {
		errs = append(errs, errors.New("db is nil"))
	}
	if err := errors.Join(append(errs, cfg.Validate())...); err != nil {
		return nil, fmt.Errorf("outbox: health monitor: %w", err)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultHealthInterval
	}
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	m := &HealthMonitor{
		db:      db,
		cfg:     cfg,
		log:     o.logger,
		metrics: o.metrics,
		timeout: min(max(cfg.Interval, time.Second), 5*time.Second),
		now:     time.Now,
		hist:    walforecast.History{Window: walforecast.DefaultWindow},
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	m.log = m.log.With(slog.String("stage", "backpressure"), slog.String("slot", cfg.Slot))
	if m.metrics == nil {
		m.metrics = nopMetrics{}
	}
	if cfg.Table != (migrations.Table{}) {
		m.cpOutbox = cfg.Table.String()
		m.cpSQL = `SELECT extract(epoch FROM clock_timestamp() - commit_time)::float8 FROM ` +
			migrations.CheckpointTable(cfg.Table).Quoted() +
			` WHERE outbox_table = $1 AND slot = $2 ORDER BY id DESC LIMIT 1`
	}
	m.last = Health{SafeWALSize: -1, Forecast: -1, OldestUnacked: -1}
	m.state.Store(&monitorState{health: m.last})
	return m, nil
}

// Check reports whether an event of priority p may be written now: nil,
// or the *BackpressureError of the crossed budget. It does no I/O and
// takes no lock — an atomic load of the state the last refresh evaluated
// — so Writers call it on every Append. Critical events are refused only
// by a crossed Hard budget.
func (m *HealthMonitor) Check(p Priority) error {
	if be := m.refusal(p); be != nil {
		return be
	}
	return nil
}

// refusal is Check with a typed result (nil pointer: admitted).
func (m *HealthMonitor) refusal(p Priority) *BackpressureError {
	if m == nil {
		return nil
	}
	s := m.state.Load()
	if s.hard == nil && (s.soft == nil || p == PriorityCritical) {
		return nil
	}
	// Engaged: refuse only on a reading that is still fresh. Run keeps it
	// fresh; if Run stopped or hangs, the engaged state expires by itself.
	if m.now().After(s.until) {
		return nil
	}
	if p != PriorityCritical && s.soft != nil {
		return s.soft
	}
	return s.hard
}

// Health returns the last reading, with the error of the last refresh.
func (m *HealthMonitor) Health() Health {
	return m.state.Load().health
}

// Run refreshes at once, then every Interval, until ctx ends. Failures
// are logged (a warning at most once a minute) and retried at the next
// tick; a reading that stays stale for three intervals refuses nothing.
func (m *HealthMonitor) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Interval)
	defer t.Stop()
	for {
		_ = m.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// slotReading is one row of the slot query.
type slotReading struct {
	walStatus *string
	safe      *int64
	retained  *int64
	current   int64
	confirmed *int64
}

// The slot query. pg_current_wal_lsn() is read once (the subquery) so the
// retained WAL and the current position agree; LSNs are returned as byte
// offsets from 0/0 for comparison with earlier readings.
const slotSQL = `SELECT s.wal_status, s.safe_wal_size,
		pg_wal_lsn_diff(c.lsn, s.restart_lsn)::bigint,
		pg_wal_lsn_diff(c.lsn, '0/0')::bigint,
		pg_wal_lsn_diff(s.confirmed_flush_lsn, '0/0')::bigint
	FROM (SELECT pg_current_wal_lsn() AS lsn) c, pg_replication_slots s
	WHERE s.slot_name = $1`

// Refresh takes one reading now, evaluates the budgets on it and
// publishes the result to Check, logging and reporting a level that
// engages or releases. It returns the refresh's error (also in
// Health().Err); the previous reading then stays in force until it is
// stale.
func (m *HealthMonitor) Refresh(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.readSlot(ctx)
	now := m.now()
	if err != nil {
		m.last.Err = err
		m.warn(ctx, now, "back-pressure reading failed; the last reading stays in force until it is stale", err)
		m.publish(now)
		return err
	}
	commitAge, cpErr := m.readCheckpoint(ctx)
	h := Health{At: now, WALStatus: "", SafeWALSize: -1, Forecast: -1, OldestUnacked: -1}
	if r.walStatus != nil {
		h.WALStatus = *r.walStatus
	}
	if r.safe != nil {
		h.SafeWALSize = *r.safe
	}
	if r.retained != nil {
		h.RetainedWAL = max(*r.retained, 0)
	}
	switch {
	case h.WALStatus == "lost" || r.retained == nil:
		m.hist.Reset()
	default:
		samples := m.hist.Add(walforecast.Sample{At: now, Retained: *r.retained})
		if secs, ok := walforecast.Forecast(samples, walforecast.Limits{SafeWALSize: r.safe, DiskBudget: m.cfg.DiskBudget}); ok {
			h.Forecast = forecastDuration(secs)
		}
	}
	if r.confirmed != nil {
		var commitAt time.Time
		if commitAge != nil {
			commitAt = now.Add(-time.Duration(*commitAge * float64(time.Second)))
		}
		h.OldestUnacked = m.clock.observe(now, r.current, *r.confirmed, commitAt)
	} else {
		m.clock.reset()
	}
	if cpErr != nil {
		h.Err = cpErr
		m.warn(ctx, now, "relay checkpoint not readable; the oldest event's age comes from the slot alone", cpErr)
	}
	m.last, m.lastOK = h, now
	m.publish(now)
	return cpErr
}

func (m *HealthMonitor) readSlot(ctx context.Context) (slotReading, error) {
	qctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var r slotReading
	err := m.db.QueryRow(qctx, slotSQL, m.cfg.Slot).Scan(&r.walStatus, &r.safe, &r.retained, &r.current, &r.confirmed)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("replication slot %q does not exist", m.cfg.Slot)
	}
	if err != nil {
		return r, fmt.Errorf("read replication slot %q: %w", m.cfg.Slot, err)
	}
	return r, nil
}

// readCheckpoint returns the age, on the server's clock, of the commit
// time of the relay's newest checkpoint (nil: none or unknown).
func (m *HealthMonitor) readCheckpoint(ctx context.Context) (*float64, error) {
	if m.cpSQL == "" {
		return nil, nil
	}
	qctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var age *float64
	err := m.db.QueryRow(qctx, m.cpSQL, m.cpOutbox, m.cfg.Slot).Scan(&age)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read relay checkpoint of %s: %w", m.cpOutbox, err)
	}
	if age != nil && (math.IsNaN(*age) || math.IsInf(*age, 0)) {
		return nil, nil
	}
	return age, nil
}

// warn logs a failure at warn level at most once a minute (debug
// otherwise), and not at all when ctx ended.
func (m *HealthMonitor) warn(ctx context.Context, now time.Time, msg string, err error) {
	if ctx.Err() != nil {
		return
	}
	level := slog.LevelDebug
	if now.Sub(m.lastWarn) >= time.Minute {
		level, m.lastWarn = slog.LevelWarn, now
	}
	m.log.LogAttrs(ctx, level, msg, slog.Any("error", err))
}

// publish evaluates the budgets on the last reading at now, stores the
// state for Check and reports every level that engaged or released.
func (m *HealthMonitor) publish(now time.Time) {
	h := m.last
	until := m.lastOK.Add(staleAfter * m.cfg.Interval)
	fresh := !m.lastOK.IsZero() && !now.After(until)
	var softReasons, hardReasons []string
	switch {
	case fresh:
		softReasons = m.cfg.Soft.crossed(h, m.softOn)
		hardReasons = m.cfg.Hard.crossed(h, m.hardOn)
		if m.staleLogged {
			m.log.Info("back-pressure reading is fresh again")
			m.staleLogged = false
		}
	case m.fresh:
		m.log.Warn("back-pressure reading is stale: nothing is refused until a refresh succeeds",
			slog.Duration("age", now.Sub(m.lastOK).Round(time.Millisecond)), slog.Any("error", h.Err))
		m.staleLogged = true
	}
	m.fresh = fresh
	s := &monitorState{health: h, until: until}
	m.softOn = m.transition(BackpressureSoft, m.softOn, softReasons, h, now)
	m.hardOn = m.transition(BackpressureHard, m.hardOn, hardReasons, h, now)
	if m.softOn {
		s.soft = m.refusalFor(BackpressureSoft, softReasons, h)
	}
	if m.hardOn {
		s.hard = m.refusalFor(BackpressureHard, hardReasons, h)
	}
	m.state.Store(s)
}

func (m *HealthMonitor) refusalFor(level string, reasons []string, h Health) *BackpressureError {
	return &BackpressureError{Level: level, Reasons: reasons, Health: h, msg: backpressureMessage(m.cfg.Slot, level, reasons)}
}

// transition logs and reports a change of one level and returns the new
// engaged state.
func (m *HealthMonitor) transition(level string, was bool, reasons []string, h Health, now time.Time) bool {
	on := len(reasons) > 0
	if on == was {
		return on
	}
	m.metrics.BackpressureEngaged(level, on)
	attrs := []slog.Attr{
		slog.String("budget", level),
		slog.Int64("retained_wal_bytes", h.RetainedWAL),
		slog.Int64("safe_wal_size_bytes", h.SafeWALSize),
		slog.String("wal_status", h.WALStatus),
		forecastAttr(h.Forecast),
		slog.Duration("oldest_unacked", h.OldestUnacked.Round(time.Millisecond)),
	}
	ctx := context.Background()
	switch {
	case on && level == BackpressureHard:
		m.log.LogAttrs(ctx, slog.LevelError, "back-pressure engaged: every event is refused",
			append(attrs, slog.Any("reasons", reasons))...)
	case on:
		m.log.LogAttrs(ctx, slog.LevelWarn, "back-pressure engaged: non-critical events are refused",
			append(attrs, slog.Any("reasons", reasons))...)
	default:
		why := "the readings are back inside the budget"
		if h.At.IsZero() || now.Sub(h.At) > staleAfter*m.cfg.Interval {
			why = "the reading is stale (fails open)"
		}
		m.log.LogAttrs(ctx, slog.LevelInfo, "back-pressure released", append(attrs, slog.String("reason", why))...)
	}
	return on
}

// forecastDuration converts the forecast's seconds: +Inf (not growing)
// is -1 like "no forecast", huge values saturate.
func forecastDuration(secs float64) time.Duration {
	switch {
	case math.IsInf(secs, 1) || math.IsNaN(secs):
		return -1
	case secs <= 0:
		return 0
	case secs >= float64(math.MaxInt64)/float64(time.Second):
		return math.MaxInt64
	}
	return time.Duration(secs * float64(time.Second))
}

// walClock dates the oldest WAL the slot has not confirmed from the
// monitor's own samples of pg_current_wal_lsn(): the samples not yet
// confirmed are kept (thinned beyond maxPending), and the newest one the
// slot confirmed is remembered. Since the WAL position only grows, the
// unconfirmed WAL was written after that sample and before the oldest
// pending one.
type walClock struct {
	pending   []lsnSample // not yet confirmed, oldest first
	covered   time.Time   // newest sample at or below the confirmed position
	confirmed int64
}

type lsnSample struct {
	at  time.Time
	lsn int64
}

// maxPending bounds the samples kept during a long outage; thinning keeps
// the oldest, so the age stays exact for the unconfirmed WAL's start and
// coarser (at most 2x the spacing) in between.
const maxPending = 256

// observe records a reading (current WAL position, the slot's confirmed
// position, the relay's last acknowledged commit time or zero) and
// returns the age of the oldest unconfirmed WAL (see Health.OldestUnacked).
func (c *walClock) observe(now time.Time, current, confirmed int64, commitAt time.Time) time.Duration {
	if confirmed < c.confirmed {
		// Moved backwards (a PostgreSQL crash, a recreated slot): what
		// was covered may not be any more.
		c.covered = time.Time{}
	}
	c.confirmed = confirmed
	c.pending = append(c.pending, lsnSample{at: now, lsn: current})
	n := 0
	for n < len(c.pending) && c.pending[n].lsn <= confirmed {
		c.covered = c.pending[n].at
		n++
	}
	c.pending = append(c.pending[:0], c.pending[n:]...)
	if len(c.pending) > maxPending {
		kept := c.pending[:1]
		for i := 2; i < len(c.pending)-1; i += 2 {
			kept = append(kept, c.pending[i])
		}
		c.pending = append(kept, c.pending[len(c.pending)-1])
	}
	switch {
	case len(c.pending) == 0:
		return 0
	case !c.covered.IsZero():
		since := c.covered
		if commitAt.After(since) {
			since = commitAt
		}
		return max(now.Sub(since), 0)
	}
	// The unconfirmed WAL predates every sample: count from the oldest.
	return now.Sub(c.pending[0].at)
}

func (c *walClock) reset() { *c = walClock{pending: c.pending[:0]} }

// forecastAttr logs the forecast to the second, or "none" when the slot's
// retained WAL is not growing (a negative Forecast).
func forecastAttr(f time.Duration) slog.Attr {
	if f < 0 {
		return slog.String("forecast", "none")
	}
	return slog.Duration("forecast", f.Round(time.Second))
}
