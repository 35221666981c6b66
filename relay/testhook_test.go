package relay

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// TestHeldProgressLagsFlushed runs in a synctest bubble: the hold is
// measured on the fake clock, so each sleep passes exactly 60 ms.
func TestHeldProgressLagsFlushed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := checkpoint.New(100, checkpoint.Limits{})
		h := newHeldProgress(tr, 50*time.Millisecond)
		if got := h.Flushed(); got != 0 {
			t.Fatalf("fresh: %s, want 0 (nothing old enough)", got)
		}
		time.Sleep(60 * time.Millisecond) // virtual time: past the hold
		if got := h.Flushed(); got != 100 {
			t.Fatalf("after the hold: %s, want 100", got)
		}
		tr.AdvanceIdle(500)
		if got := h.Flushed(); got != 100 {
			t.Fatalf("just advanced: %s, want still 100", got)
		}
		time.Sleep(60 * time.Millisecond) // virtual time: past the hold
		if got := h.Flushed(); got != 500 {
			t.Fatalf("after the hold: %s, want 500", got)
		}
	})
}
