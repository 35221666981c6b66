package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/replication"
)

// testStatusHoldEnv names a test hook: standby status updates confirm only
// positions acknowledged at least that long ago, while checkpoints are
// saved as usual. It widens the (normally ~100 ms) window in which a
// checkpoint is ahead of the slot, so a kill -9 test can land in it
// deterministically. Not a flag on purpose: it only makes redelivery worse.
const testStatusHoldEnv = envPrefix + "TEST_STATUS_HOLD"

func testStatusHold(b *flagBinder) time.Duration {
	v, ok := b.env("test-status-hold")
	if !ok || v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		b.errs = append(b.errs, fmt.Errorf("%s=%q is not a duration", testStatusHoldEnv, v))
		return 0
	}
	return d
}

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
