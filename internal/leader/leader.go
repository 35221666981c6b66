package leader

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// ApplicationName is the application_name of lock sessions; a standby names
// the session that holds the lock by it in its logs.
const ApplicationName = "outbox-relay-leader"

// ErrLost is the cause of a Lease's context when the leader could no longer
// confirm that it holds the lock.
var ErrLost = errors.New("leadership lost")

// ErrReleased is the cause of a Lease's context after Release.
var ErrReleased = errors.New("leadership released")

// Key returns the advisory lock key of slot in database (see the package
// documentation for why both are part of it).
func Key(database, slot string) int64 {
	h := sha256.Sum256([]byte("outbox-relay/leader\x00" + database + "\x00" + slot))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Config configures an Elector.
type Config struct {
	// DatabaseURL is the PostgreSQL URL of the lock connection. It must
	// reach PostgreSQL directly: a transaction-pooling proxy would lose the
	// session lock.
	DatabaseURL string
	// Slot is the replication slot the election is for.
	Slot string
	// PollInterval is how often a standby tries to take the lock. It bounds
	// the takeover after a leader releases the lock (SIGTERM).
	PollInterval time.Duration
	// KeepaliveInterval is how often the leader checks its lock connection.
	KeepaliveInterval time.Duration
	// Timeout bounds silence on the lock connection: the leader gives up
	// after Timeout/2 without a successful keepalive, and the server ends a
	// lock session idle for Timeout (idle_session_timeout), releasing the
	// lock for a standby.
	Timeout time.Duration
	// BeforeConnect, when set, is called with a copy of the parsed
	// configuration before each lock connection is opened, so rotating or
	// expiring credentials are fetched at every (re)connect
	// (relay.DatabaseConfig.BeforeConnect).
	BeforeConnect func(ctx context.Context, cfg *pgconn.Config) error
}

// Validate checks the intervals against each other; each error says how to
// fix it.
func (c Config) Validate() error {
	if c.Timeout < time.Second {
		// The intervals are checked against the timeout: not against
		// one that is itself wrong.
		return errors.New("leader timeout: use at least 1s")
	}
	var errs []error
	if c.KeepaliveInterval <= 0 || c.KeepaliveInterval > c.Timeout/4 {
		errs = append(errs, fmt.Errorf("leader keepalive interval %s: use a positive value of at most a quarter of the leader timeout (%s)",
			c.KeepaliveInterval, c.Timeout/4))
	}
	if c.PollInterval <= 0 || c.PollInterval > c.Timeout/2 {
		errs = append(errs, fmt.Errorf("leader poll interval %s: use a positive value of at most half the leader timeout (%s)",
			c.PollInterval, c.Timeout/2))
	}
	return errors.Join(errs...)
}

// Role is what an Elector currently is.
type Role int32

const (
	// RoleConnecting: no working lock connection yet (or again).
	RoleConnecting Role = iota
	// RoleStandby: connected, the lock is held by another process.
	RoleStandby
	// RoleLeader: this process holds the lock.
	RoleLeader
)

func (r Role) String() string {
	switch r {
	case RoleConnecting:
		return "connecting"
	case RoleStandby:
		return "standby"
	case RoleLeader:
		return "leader"
	}
	return "role(" + strconv.Itoa(int(r)) + ")"
}

// Status is a snapshot of an Elector, for health checks.
type Status struct {
	Role Role
	// LastContact is when the lock connection last answered (a try-lock
	// poll or a keepalive); zero before the first answer.
	LastContact time.Time
}

// Elector campaigns for the lock of one slot. Campaign is called by one
// goroutine at a time; Status is safe for concurrent use.
type Elector struct {
	cfg     Config
	conn    *pgx.ConnConfig
	log     *slog.Logger
	role    atomic.Int32
	contact atomic.Int64 // unix nanoseconds
}

// NewElector returns an elector for cfg.
func NewElector(cfg Config, log *slog.Logger) (*Elector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("leader: parse database URL: %w", err)
	}
	cc.RuntimeParams["application_name"] = ApplicationName
	// The server ends a lock session that stayed silent this long, which
	// releases a cut-off or frozen leader's lock.
	cc.RuntimeParams["idle_session_timeout"] = strconv.FormatInt(cfg.Timeout.Milliseconds(), 10)
	// Connecting through a hung network must not block a standby for long.
	cc.ConnectTimeout = cfg.Timeout / 2
	probe := max(cfg.KeepaliveInterval, time.Second)
	d := &net.Dialer{
		Timeout: cfg.Timeout / 2,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: probe, Interval: probe, Count: 3,
		},
	}
	cc.DialFunc = d.DialContext
	e := &Elector{cfg: cfg, conn: cc, log: log.With(slog.String("stage", "leader"))}
	return e, nil
}

// Status returns the elector's current role and last contact.
func (e *Elector) Status() Status {
	s := Status{Role: Role(e.role.Load())}
	if n := e.contact.Load(); n != 0 {
		s.LastContact = time.Unix(0, n)
	}
	return s
}

func (e *Elector) touch() { e.contact.Store(time.Now().UnixNano()) }

// Campaign blocks as a standby until this process holds the lock, and
// returns the Lease. It returns ctx.Err() when ctx ends first.
func (e *Elector) Campaign(ctx context.Context) (*Lease, error) {
	var conn *pgx.Conn
	var key int64
	closeConn := func() {
		if conn != nil {
			closeBounded(conn)
			conn = nil
		}
	}
	defer closeConn()
	failures := 0
	var failing time.Time  // when the current run of failures began
	var holderLogged int32 // backend pid of the holder last logged
	for {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if conn == nil {
			e.role.Store(int32(RoleConnecting))
			c, k, err := e.connect(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				failures++
				if failures == 1 {
					failing = time.Now()
				}
				d := e.backoff(time.Since(failing))
				e.log.Warn("lock connection failed, retrying", slog.Int("attempt", failures), slog.Duration("backoff", d), slog.Any("error", err))
				if !backoff.Sleep(ctx, d) {
					return nil, ctx.Err()
				}
				continue
			}
			conn, key = c, k
		}
		sent := time.Now()
		qctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout/2)
		var got bool
		err := conn.QueryRow(qctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&got)
		cancel()
		if err != nil {
			closeConn()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			failures++
			if failures == 1 {
				failing = time.Now()
			}
			d := e.backoff(time.Since(failing))
			e.log.Warn("lock poll failed, reconnecting", slog.Int("attempt", failures), slog.Duration("backoff", d), slog.Any("error", err))
			if !backoff.Sleep(ctx, d) {
				return nil, ctx.Err()
			}
			continue
		}
		failures = 0
		e.touch()
		if got {
			l := newLease(e, conn, key, sent)
			conn = nil // the lease owns it now
			e.role.Store(int32(RoleLeader))
			e.log.Info("lock acquired: leading", slog.Int64("lock_key", key))
			return l, nil
		}
		if e.role.Swap(int32(RoleStandby)) != int32(RoleStandby) || holderLogged == 0 {
			pid, app, addr := holder(ctx, conn, key)
			if pid != holderLogged {
				holderLogged = pid
				e.log.Info("standby: another relay holds the lock", slog.Int64("lock_key", key), slog.Int64("holder_pid", int64(pid)), slog.String("holder_application", app), slog.String("holder_addr", addr), slog.Duration("poll_interval", e.cfg.PollInterval))
			}
		}
		if !backoff.Sleep(ctx, e.nextPoll(ctx, conn, key)) {
			return nil, ctx.Err()
		}
	}
}

// expiryMargin is how long after the holder's expected end a standby
// polls: the server's idle_session_timeout timer, then the backend's exit
// that frees the lock.
const expiryMargin = 50 * time.Millisecond

// nextPoll is how long a standby waits before the next try: PollInterval,
// or less when the holder's lock session has been idle so long that the
// server ends it (idle_session_timeout = Timeout) sooner. A leader cut
// off without a reset keeps its session on the server until then; polling
// right at that moment instead of up to PollInterval later is what keeps
// the takeover within Timeout of the cut. The idle time is the server's
// (now() - state_change), so no clock skew enters. A holder idle longer
// than Timeout (another relay with a longer --leader-timeout) falls back
// to PollInterval: no hot loop.
func (e *Elector) nextPoll(ctx context.Context, conn *pgx.Conn, key int64) time.Duration {
	idle, st := holderIdle(ctx, conn, key)
	switch st {
	case holderGone:
		// The lock was freed between the try and this look: the holder's
		// session ended just now. Waiting a whole poll here is what made a
		// takeover up to PollInterval late; the next try takes it.
		return min(overdueRetry, e.cfg.PollInterval)
	case holderIdleState:
		return aimPoll(idle, e.cfg.Timeout, e.cfg.PollInterval)
	}
	return e.cfg.PollInterval
}

// aimPoll is the wait before the next poll when the holder's session has
// been idle for idle and the server ends it after timeout. A session
// overdue by less than a poll is being ended now, late on a loaded
// server: the standby looks again every overdueRetry instead of waiting
// a whole poll (at most poll/overdueRetry extra looks per expiry). One
// overdue by a poll or more is not being ended by this timeout (the
// server's setting differs): the regular poll.
func aimPoll(idle, timeout, poll time.Duration) time.Duration {
	rem := timeout - idle
	switch {
	case rem > 0 && rem+expiryMargin < poll:
		return rem + expiryMargin
	case rem <= 0 && -rem < poll:
		return min(overdueRetry, poll)
	}
	return poll
}

// overdueRetry is how often a standby looks again at a holder whose
// session is overdue (aimPoll).
const overdueRetry = 100 * time.Millisecond

// holderState is what a standby's look at the lock's holder found.
type holderState int

const (
	holderUnknown   holderState = iota // the look failed
	holderBusy                         // held by a session running a query or transaction
	holderIdleState                    // held by an idle session (idle says how long)
	holderGone                         // nobody holds it any more
)

// holderIdle reads how long the session holding the lock has been idle,
// on the server's clock, and whether anyone holds it at all: a holder
// whose session ended between the standby's try and this look shows as
// holderGone.
func holderIdle(ctx context.Context, conn *pgx.Conn, key int64) (time.Duration, holderState) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hi, lo := split(key)
	var held bool
	var us *int64
	err := conn.QueryRow(qctx, `SELECT count(*) > 0,
		max(CASE WHEN a.state = 'idle' THEN (extract(epoch FROM now() - a.state_change) * 1e6)::bigint END)
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 1`, hi, lo).Scan(&held, &us)
	switch {
	case err != nil:
		return 0, holderUnknown
	case !held:
		return 0, holderGone
	case us == nil:
		return 0, holderBusy
	}
	return time.Duration(*us) * time.Microsecond, holderIdleState
}

// connect opens the lock connection and derives the key from the database
// it is connected to.
func (e *Elector) connect(ctx context.Context) (*pgx.Conn, int64, error) {
	cc := e.conn
	if e.cfg.BeforeConnect != nil {
		// A copy per connect: the hook's password must not stick to the
		// template, and Copy keeps the fallbacks' TLS configs apart.
		cc = e.conn.Copy()
		if err := e.cfg.BeforeConnect(ctx, &cc.Config); err != nil {
			return nil, 0, fmt.Errorf("lock connection: before connect: %w", err)
		}
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, 0, fmt.Errorf("open lock connection: %w", err)
	}
	qctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout/2)
	defer cancel()
	var db string
	if err := conn.QueryRow(qctx, `SELECT current_database()`).Scan(&db); err != nil {
		closeBounded(conn)
		return nil, 0, fmt.Errorf("lock connection: read current database: %w", err)
	}
	return conn, Key(db, e.cfg.Slot), nil
}

// holder names the session holding the lock, best effort, for the logs.
func holder(ctx context.Context, conn *pgx.Conn, key int64) (pid int32, app, addr string) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hi, lo := split(key)
	_ = conn.QueryRow(qctx, `SELECT l.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.classid::bigint = $1 AND l.objid::bigint = $2 AND l.objsubid = 1
		LIMIT 1`, hi, lo).Scan(&pid, &app, &addr)
	return pid, app, addr
}

// split maps a bigint advisory key to pg_locks' classid (high 32 bits) and
// objid (low 32 bits).
func split(key int64) (hi, lo int64) {
	return int64(uint64(key) >> 32), int64(uint64(key) & 0xffffffff)
}

// retryBase is the first retry's bound after a lock connection or poll
// failed. It is short, not PollInterval: the usual failure is the server
// going away under the leader (a crash, a promotion), and the new primary
// answers within a second or two; a 2 s first backoff added up to 2 s to
// every failover.
const retryBase = 100 * time.Millisecond

// backoff is the wait before the next retry when the lock connection has
// been failing for outage: a quarter of it, at least retryBase and at most
// Timeout, with full jitter so replicas do not retry in step. It grows
// with the time the server has been away, not with the number of tries:
// a refused connection fails in a millisecond, and doubling per try
// reached seconds within half a second of a crash, so a standby promoted
// a second later waited up to 3 s more for the relay. This way a server
// back after an outage of X is tried again within X/4.
func (e *Elector) backoff(outage time.Duration) time.Duration {
	d := min(max(retryBase, outage/4), max(e.cfg.Timeout, e.cfg.PollInterval))
	return backoff.Jitter(1, d, d)
}

// Lease is held leadership. Its context is cancelled, with ErrLost as the
// cause, as soon as the leader can no longer confirm it holds the lock.
type Lease struct {
	e      *Elector
	conn   *pgx.Conn
	key    int64
	ctx    context.Context
	cancel context.CancelCauseFunc
	// loop runs the lease's one goroutine (keepalive): started by start,
	// stopped by Release, which waits for it.
	loop *startstop.Service
	// confirm asks the keepalive goroutine, the only user of conn, for a
	// check now (Confirm); it answers on the channel sent.
	confirm chan chan error
	// held asks the server whether this session still holds the lock
	// (heldOnConn; a fake in tests).
	held func(ctx context.Context) (bool, error)
	once sync.Once
}

func newLease(e *Elector, conn *pgx.Conn, key int64, acquired time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{e: e, conn: conn, key: key, ctx: ctx, cancel: cancel, confirm: make(chan chan error)}
	l.held = l.heldOnConn
	return l.start(acquired)
}

// start runs the keepalive from acquired, when the lock was last known
// held. Its context is not the caller's: the keepalive runs until the
// lease is lost or Release stops it, whatever the campaign's context does.
func (l *Lease) start(acquired time.Time) *Lease {
	l.loop = startstop.New(func(ctx context.Context) { l.keepalive(ctx, acquired) })
	l.loop.Start(context.Background())
	return l
}

// heldOnConn asks the server, on the lock connection, whether its session
// holds the lock.
func (l *Lease) heldOnConn(ctx context.Context) (bool, error) {
	hi, lo := split(l.key)
	var held bool
	err := l.conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND pid = pg_backend_pid() AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)`, hi, lo).Scan(&held)
	return held, err
}

// Context is cancelled when leadership ends (lost or released); streaming
// must stop with it. It is not cancelled by the caller's own shutdown.
func (l *Lease) Context() context.Context { return l.ctx }

// Err is nil while the lease holds, else ErrLost (wrapping the reason) or
// ErrReleased.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// keepalive confirms the lock every KeepaliveInterval, until ctx ends
// (Release) or a check fails. The deadline of each check is Timeout/2
// after the last successful one was sent, so a silent connection is given
// up well before the server frees the lock.
//
// It shares nothing with the stream or Kafka: its own goroutine, its own
// connection, no lock or pool. What it does share is the process's CPU
// and the machine: a check that starts late (the goroutine was not run: a
// stalled machine, a paused process) still asks the server, with at least
// Timeout/4 to answer, instead of failing on a deadline that passed while
// it waited. The server's answer is what counts: a session the server
// ended for its silence (idle_session_timeout) fails the check, so a late
// check never confirms a lock that was freed.
func (l *Lease) keepalive(ctx context.Context, last time.Time) {
	t := time.NewTicker(l.e.cfg.KeepaliveInterval)
	defer t.Stop()
	answered := last // when the last check returned: lateness counts from there
	for {
		var reply chan error // a Confirm waiting for this check
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case reply = <-l.confirm:
		}
		sent := time.Now()
		deadline, late := checkDeadline(last, answered, sent, l.e.cfg.KeepaliveInterval, l.e.cfg.Timeout)
		if late > l.e.cfg.Timeout/4 {
			// Not the server's silence: this goroutine ran late. Say so,
			// since it tells a stalled machine from a lost server.
			l.e.log.Warn("lock keepalive ran late: the process or its machine stalled; asking the server",
				slog.Duration("late", late.Round(time.Millisecond)), slog.Duration("since_last_keepalive", sent.Sub(last).Round(time.Millisecond)))
		}
		// Not ctx: Release lets a check that is under way finish.
		cctx, cancel := context.WithDeadline(context.Background(), deadline)
		held, err := l.held(cctx)
		cancel()
		if err == nil && !held {
			err = errors.New("the advisory lock is no longer held by this session")
		}
		if err != nil {
			l.cancel(fmt.Errorf("%w: lock connection unconfirmed for %s: %v", ErrLost, time.Since(last).Round(time.Millisecond), err))
			l.e.role.Store(int32(RoleConnecting))
			l.e.log.Warn("leadership lost: stopping the stream", slog.Any("error", err), slog.Duration("since_last_keepalive", time.Since(last)))
			if reply != nil {
				reply <- l.Err()
			}
			return
		}
		l.e.touch()
		last, answered = sent, time.Now()
		if reply != nil {
			reply <- nil
		}
	}
}

// checkDeadline is the deadline of a keepalive check sent at sent, after
// the last successful one was sent at last and the previous check
// returned at answered, and how late this one runs. It is Timeout/2 after
// last, which gives a silent server up well before it frees the lock
// (Timeout), but never less than Timeout/4 from now: a check that starts
// late, after a slow answer or behind a stalled goroutine, must still ask
// the server rather than fail on a deadline that passed while it waited.
// The answer is what counts, so a longer deadline never confirms a lock
// the server freed.
func checkDeadline(last, answered, sent time.Time, interval, timeout time.Duration) (deadline time.Time, late time.Duration) {
	deadline = last.Add(timeout / 2)
	if min := sent.Add(timeout / 4); deadline.Before(min) {
		deadline = min
	}
	return deadline, sent.Sub(answered) - interval
}

// Confirm checks the lock now instead of at the next keepalive, and
// returns nil while the lease holds, else why it ended (the lease's
// context is then cancelled). A caller that saw its server connection
// break calls it before reconnecting: when the server crashed, or a
// multi-host URL now leads to a promoted standby, the lock went with the
// old server, and the relay must campaign again on the new one rather
// than stream there on a lock it no longer holds.
func (l *Lease) Confirm(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case l.confirm <- reply:
	case <-l.loop.Done(): // keepalive ended: lost, or being released
		if err := l.Err(); err != nil {
			return err
		}
		return ErrReleased
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Release gives the lock up (after the stream has stopped) and closes the
// lock connection, so a standby takes over within its poll interval. It is
// idempotent; the error is informational (closing the session frees the lock
// in any case).
func (l *Lease) Release(ctx context.Context) error {
	var err error
	l.once.Do(func() {
		l.loop.Stop()
		lost := l.ctx.Err() != nil
		l.cancel(ErrReleased)
		if !lost {
			uctx, cancel := context.WithTimeout(ctx, l.e.cfg.Timeout/2)
			var ok bool
			if err = l.conn.QueryRow(uctx, `SELECT pg_advisory_unlock($1)`, l.key).Scan(&ok); err == nil && !ok {
				err = errors.New("pg_advisory_unlock: lock was not held")
			}
			cancel()
			l.e.log.Info("lock released")
		}
		closeBounded(l.conn)
		l.e.role.Store(int32(RoleConnecting))
	})
	return err
}

func closeBounded(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.Close(ctx)
}
