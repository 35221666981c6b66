package relay

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-relay/outbox-relay/poison"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/internal/leader"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// errLeadershipLost ends lead when the lease ends before SIGTERM.
var errLeadershipLost = errors.New("leadership lost")

// lead streams while lease holds: stream attempts with reconnects, as
// before leader election, plus the WAL heartbeat and the cleanup schedule.
// Losing the lease cancels the stream at once (nothing more is drained or
// published). lead returns only after the heartbeat and the cleanup
// schedule stopped: the next term (or the next Relay of an in-process
// restart) starts its own, never a second beside them.
func (r *Relay) lead(ctx context.Context, lease *leader.Lease) error {
	lctx := lease.Context()
	hctx, cancel := context.WithCancel(lctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	r.loops.heartbeat.Start(hctx)
	r.loops.cleanup.Start(hctx)
	defer startstop.StopAll(r.loops.heartbeat, r.loops.cleanup)

	var tried int32 // the walsender a takeover last tried to end
	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := r.stream(ctx, lctx)
		if err == nil || ctx.Err() != nil && !poison.IsPermanent(err) {
			r.log.Info("stopped", slog.String("stage", "shutdown"))
			return nil
		}
		if lctx.Err() != nil {
			return errLeadershipLost
		}
		var fence *fenceError
		if errors.As(err, &fence) {
			// A former leader's walsender still holds the slot. This
			// relay holds the lock, so nobody leads that walsender: end
			// it (takeover.go), once per walsender, and stream at once.
			if fence.pid != tried {
				tried = fence.pid
				if r.takeover(hctx, lease, fence.pid) {
					attempt = 0
					continue
				}
				if lctx.Err() != nil && ctx.Err() == nil {
					return errLeadershipLost
				}
			}
			// It could not be ended (see the warning): the server ends it
			// within its wal_sender_timeout. Poll, don't back off.
			r.log.Info("waiting for the former leader's walsender to release the slot", slog.String("stage", "leader"), slog.Int64("pid", int64(fence.pid)))
			if !backoff.Sleep(hctx, r.cfg.Leader.PollInterval) {
				if lctx.Err() != nil && ctx.Err() == nil {
					return errLeadershipLost
				}
				return nil
			}
			attempt = 0
			continue
		}
		if poison.IsPermanent(err) {
			r.log.Error("stopping: permanent failure, slot position held", slog.String("stage", "stream"), slog.Any("error", hint.With(err)))
			return err
		}
		// A broken stream may be a crashed server, whose lock went with it:
		// confirm the lock before reconnecting, which a multi-host URL may
		// lead to a promoted standby where this relay holds no lock.
		if lease.Confirm(hctx) != nil {
			if ctx.Err() != nil {
				return nil
			}
			return errLeadershipLost
		}
		if time.Since(started) > time.Minute {
			attempt = 1
		}
		var su *publisher.SchemaUnavailableError
		if errors.As(err, &su) {
			r.registryOut.down(su, r.tracker.Load(), time.Now())
		}
		d := backoff.Jitter(attempt, 200*time.Millisecond, r.cfg.Publish.BackoffMax)
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
// or our own previous connection): nobody leads it, so the new leader ends
// it (takeover.go), or waits for the server to, instead of failing.
type fenceError struct {
	pid int32
	err error
}

func (e *fenceError) Error() string { return e.err.Error() }
func (e *fenceError) Unwrap() error { return e.err }

// fence classifies an active slot: held by a relay's walsender, the leader
// ends it or waits for it (the slot's one-consumer rule is what keeps a
// stale leader from streaming on); held by any other client, the relay
// stops, as without leader election.
func (r *Relay) fence(ctx context.Context, active *slot.ActiveError) error {
	var app string
	err := r.slotDB.QueryRow(ctx, `SELECT coalesce(application_name, '') FROM pg_stat_activity WHERE pid = $1`, active.PID).Scan(&app)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && app == replication.ApplicationName {
		return &fenceError{pid: active.PID, err: active}
	}
	if err != nil {
		return fmt.Errorf("%w (and its application_name could not be read: %v)", active, err)
	}
	return poison.Permanent(active)
}
