package outboxdb

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/poison"
)

// Retry delays of ConnectRetrying: the same shape as the wait for Kafka.
const (
	retryBase      = 500 * time.Millisecond
	retryMax       = 30 * time.Second
	attemptTimeout = 15 * time.Second
)

// ConnectRetrying is Connect for a long-running process: while PostgreSQL
// cannot be reached (not up yet, restarting, a network blip) it retries
// with backoff and logs each attempt, rather than exiting and leaving a
// supervisor to restart it in a crash loop. A failure no retry can cure
// (wrong password, missing database, missing privilege, a TLS set-up
// error) is returned at once, as is ctx's error once ctx ends.
func ConnectRetrying(ctx context.Context, pc *pgxpool.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, attemptTimeout)
		pool, err := Connect(actx, pc)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("PostgreSQL reachable", slog.String("stage", "startup"), slog.Int("attempt", attempt))
			}
			return pool, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !Transient(err) {
			return nil, err
		}
		d := backoff.Jitter(attempt, retryBase, retryMax)
		log.Warn("PostgreSQL unreachable, retrying", slog.String("stage", "startup"), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.Any("error", err))
		if !backoff.Sleep(ctx, d) {
			return nil, ctx.Err()
		}
	}
}

// Transient reports whether err, from connecting to PostgreSQL, may pass
// by itself: the server is unreachable, refuses or drops connections, is
// starting up or shutting down, or has no connection slot free, or no
// server of a multi-host URL is writable yet (target_session_attrs =
// read-write during a failover, before the standby is promoted). Errors
// the server gives about the login itself (password, database,
// privileges) and TLS set-up errors are not.
func Transient(err error) bool {
	if err == nil || poison.IsPermanent(hint.With(err)) {
		return false
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection) {
		return true
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", // admin/crash shutdown, cannot connect now (starting up, shutting down)
			"53300": // too many connections
			return true
		}
		return pe.Code[:2] == "08" // connection exception
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}
