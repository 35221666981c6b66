package relay

// This file holds the slot watch (watchSlot): the loop of one goroutine,
// a startstop service that drive owns, starts with the stream and stops
// (waiting for it) before it returns, so no slot query of a stream runs
// after it. It reads the slot through r.slots and reports a lost or
// dropped slot through fail (drive's setFatal); it also sets the
// quarantined-aggregates gauge.

import (
	"context"
	"errors"
	"log/slog"

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
