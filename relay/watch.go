package relay

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// watchSlot re-reads the slot while streaming: a slot invalidated by
// max_slot_wal_keep_size or dropped can never deliver the WAL it lost, and
// streaming on would hide that events may be missing.
func (r *Relay) watchSlot(ctx context.Context, fail func(error)) {
	defer r.loopExit("slot watch")
	every(ctx, r.cfg.Database.SlotCheckInterval, func() bool {
		st, err := r.slots.Status(ctx)
		switch {
		case errors.Is(err, slot.ErrSlotNotFound):
			fail(slotGone(err))
			return false
		case err != nil:
			r.log.Debug("slot check failed", slog.String("stage", "slot_check"), slog.Any("error", err))
		case st.LostError() != nil:
			fail(st.LostError())
			return false
		default:
			if r.quar != nil {
				r.m.Quarantined.Set(float64(r.quar.Quarantined()))
			}
		}
		return true
	})
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

// waitForKafka retries until a broker answers, so a relay started before
// Kafka waits instead of crash-looping. It returns false on shutdown, and
// an error for a failure no retry can cure (a certificate that does not
// verify, wrong credentials).
func (r *Relay) waitForKafka(ctx context.Context) (bool, error) {
	pub := r.publish().Publisher(publisher.WithLogger(r.log), publisher.WithMetrics(r.m.Publisher()))
	defer pub.Close()
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Ping(pctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				r.log.Info("kafka reachable", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt))
			}
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if err := hint.With(err); poison.IsPermanent(err) {
			return false, err
		}
		d := backoff.Jitter(attempt, 500*time.Millisecond, 30*time.Second)
		r.log.Warn("kafka unreachable, retrying", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !backoff.Sleep(ctx, d) {
			return false, nil
		}
	}
}

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

// observe copies the window's state into gauges.
func (r *Relay) observe(ctx context.Context) {
	defer r.loopExit("observer")
	every(ctx, time.Second, func() bool {
		tr := r.tracker.Load()
		if tr == nil {
			return true
		}
		s := tr.Stats()
		if r.streaming.Load() {
			r.stalls.observe(time.Now(), s)
		} else {
			r.stalls.observe(time.Now(), checkpoint.WindowStats{})
		}
		r.m.InflightEvents.Set(float64(s.Events))
		r.m.InflightBytes.Set(float64(s.Bytes))
		r.m.CheckpointHeld.Set(float64(s.Held))
		if s.OldestCommit.IsZero() {
			r.m.OldestUnackedAge.Set(0)
		} else {
			r.m.OldestUnackedAge.Set(time.Since(s.OldestCommit).Seconds())
		}
		return true
	})
}
