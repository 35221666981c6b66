package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A new leader that finds the slot still held by a relay's walsender ends
// that walsender instead of waiting for the server to. The wait was the
// server's wal_sender_timeout (60 s by default) whenever the former leader
// was cut off without a reset: its lock session is freed by
// idle_session_timeout (--leader-timeout), but nothing frees its walsender
// sooner, so delivery stopped for a minute on the defaults.
//
// The lock is what makes ending it safe. The advisory lock is exclusive:
// while this process holds it, the relay that opened the walsender has lost
// its lock session, so nobody leads that stream; a former leader that is
// merely slow (decoding a large transaction) still holds the lock, and no
// standby ever gets here. Ending a walsender never loses an event either:
// the slot keeps only what was confirmed after Kafka acknowledged it, and
// the next stream resumes from there.

// takeoverTimeout bounds how long pg_terminate_backend waits for the
// walsender to exit; a walsender deep in a large transaction's decode
// checks for interrupts often, so it is gone in milliseconds.
const takeoverTimeout = 5 * time.Second

// leaseConfirmer is the part of leader.Lease a takeover needs: the server's
// word that this process holds the lock now.
type leaseConfirmer interface {
	Confirm(ctx context.Context) error
}

// rowQuerier runs one query on the server that holds the slot.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// errTakeoverLost: the lease could not be confirmed before the takeover,
// so this process may no longer lead and must not end anything.
var errTakeoverLost = errors.New("leadership not confirmed: the former leader's walsender is left alone")

// endWalsender ends the walsender pid, which holds slot on db, once lease
// confirms this process leads. It reports whether the slot is free of pid
// now (ended, or gone by itself meanwhile). An error says why it is not:
// errTakeoverLost, or the server's refusal (a role that may not signal the
// walsender's role: docs/high-availability.md).
func endWalsender(ctx context.Context, lease leaseConfirmer, db rowQuerier, slot string, pid int32) (bool, error) {
	// A process paused past the server's idle_session_timeout may not yet
	// know it lost the lock; the server's answer on the lock session is
	// what counts, so ask it right before acting on it.
	if err := lease.Confirm(ctx); err != nil {
		return false, fmt.Errorf("%w: %w", errTakeoverLost, err)
	}
	var ended bool
	// Only while pid still holds this slot: never a pid reused since.
	err := db.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid, $3) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid = $2`,
		slot, pid, takeoverTimeout.Milliseconds()).Scan(&ended)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil // released meanwhile
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return false, fmt.Errorf("end the former leader's walsender (pid %d): %w; grant the relay's role pg_signal_backend, "+
				"or run every replica as the same role, else the takeover waits for the server's wal_sender_timeout", pid, err)
		}
		return false, fmt.Errorf("end the former leader's walsender (pid %d): %w", pid, err)
	}
	if !ended {
		return false, fmt.Errorf("the former leader's walsender (pid %d) did not exit within %s of pg_terminate_backend", pid, takeoverTimeout)
	}
	return true, nil
}

// takeover tries once per walsender to end pid, the walsender a relay
// left on the slot, and reports whether the stream may start again at
// once. On failure it logs why and the caller waits, as before, for the
// server to end it.
func (r *Relay) takeover(ctx context.Context, lease leaseConfirmer, pid int32) bool {
	ended, err := endWalsender(ctx, lease, r.slotDB, r.cfg.Database.Slot, pid)
	if ended {
		r.log.Info("ended the former leader's walsender: this relay holds the lock, so nobody leads it",
			slog.String("stage", "leader"), slog.Int64("pid", int64(pid)))
		return true
	}
	if ctx.Err() == nil {
		r.log.Warn("could not end the former leader's walsender; waiting for the server to end it (wal_sender_timeout)",
			slog.String("stage", "leader"), slog.Int64("pid", int64(pid)), slog.Any("error", err))
	}
	return false
}
