package relay

// This file holds the WAL heartbeat (heartbeat): the loop of one
// goroutine, the startstop service services.heartbeat, which lead starts
// for a leadership term and stops (waiting for it) when the term ends. It
// writes on the relay's pool only; nothing else of the relay waits for
// it.

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/replication"
)

// heartbeat writes a tiny non-transactional logical message now and then.
// It reaches the relay through the slot; with nothing in flight the
// relay confirms its position, so an idle outbox never pins WAL.
func (r *Relay) heartbeat(ctx context.Context) {
	defer r.loopExit("heartbeat")
	if r.cfg.Database.HeartbeatInterval <= 0 {
		return
	}
	every(ctx, r.cfg.Database.HeartbeatInterval, func() bool {
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.pool.Exec(hctx, `SELECT pg_logical_emit_message(false, $1, '')`, replication.HeartbeatPrefix)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.log.Debug("heartbeat failed", slog.String("stage", "heartbeat"), slog.Any("error", err))
		}
		return true
	})
}
