package relay

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/replication"
)

// heldProgress is the status-hold test hook (options.statusHold, set in
// binaries built with -tags testhooks from TestStatusHoldEnv: see
// testhook_on.go): standby status updates confirm only positions
// acknowledged at least hold ago, while checkpoints are saved as usual. It
// widens the (normally ~100 ms) interval in which a checkpoint is ahead of
// the slot, so a kill -9 test can land in it deterministically. Not an
// option on purpose: it only makes redelivery worse.
//
// heldProgress reports as flushed the newest position its inner Progress
// reported at least hold ago.
type heldProgress struct {
	replication.Progress
	hold time.Duration

	mu      sync.Mutex
	samples []heldSample // oldest first, bounded
	held    pglogrepl.LSN
}

type heldSample struct {
	at  time.Time
	lsn pglogrepl.LSN
}

func newHeldProgress(p replication.Progress, hold time.Duration) *heldProgress {
	return &heldProgress{Progress: p, hold: hold}
}

func (h *heldProgress) Flushed() pglogrepl.LSN {
	now := time.Now()
	lsn := h.Progress.Flushed()
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); (n == 0 || h.samples[n-1].lsn != lsn) && n < 100000 {
		h.samples = append(h.samples, heldSample{now, lsn})
	}
	i := 0
	for i < len(h.samples) && now.Sub(h.samples[i].at) >= h.hold {
		h.held = h.samples[i].lsn
		i++
	}
	h.samples = h.samples[i:]
	return h.held
}

// AdvanceIdle is delayed too: the keepalive position goes through Flushed.
func (h *heldProgress) AdvanceIdle(lsn pglogrepl.LSN) bool { return h.Progress.AdvanceIdle(lsn) }
