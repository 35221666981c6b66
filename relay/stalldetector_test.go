package relay

import (
	"testing"
	"time"
)

// clock is a fake clock advanced by the tests, one observer tick at a time.
type clock struct{ now time.Time }

func (c *clock) tick(d time.Duration) time.Time {
	c.now = c.now.Add(d)
	return c.now
}

func TestStallReportedOnceAfterTimeout(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	d := newStallDetector(5 * time.Second)
	if _, ch := d.Observe(c.now, 100, 10); ch != stallUnchanged {
		t.Fatalf("first sample: %v", ch)
	}
	var stalledAt time.Duration
	stalls := 0
	for i := 1; i <= 20; i++ {
		st, ch := d.Observe(c.tick(time.Second), 100, 10) // no acknowledgement
		if ch == stallStalled {
			stalls++
			stalledAt = time.Duration(i) * time.Second
			if !st.Stalled || st.Inflight != 100 || c.now.Sub(st.LastProgress) != stalledAt {
				t.Fatalf("state at the stall: %+v", st)
			}
		}
		if ch == stallResumed {
			t.Fatalf("resumed without an acknowledgement at %ds", i)
		}
	}
	if stalls != 1 || stalledAt != 5*time.Second {
		t.Fatalf("%d stalls reported, first at %s; want exactly one at 5s", stalls, stalledAt)
	}
	st, ch := d.Observe(c.tick(time.Second), 99, 11)
	if ch != stallResumed || st.Stalled || st.LastProgress != c.now {
		t.Fatalf("after an acknowledgement: %v %+v", ch, st)
	}
	if _, ch := d.Observe(c.tick(time.Second), 99, 11); ch != stallUnchanged {
		t.Fatalf("resume reported twice: %v", ch)
	}
}

// TestSlowDrainIsNoStall: a drain that acknowledges one event every
// timeout minus a tick for far longer than the timeout never stalls.
func TestSlowDrainIsNoStall(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	timeout := 5 * time.Second
	d := newStallDetector(timeout)
	acked := 0
	for i := 0; i < 600; i++ { // 10 minutes, a sample a second
		if i%4 == 0 {
			acked++ // one acknowledgement every 4s, under the 5s timeout
		}
		if st, ch := d.Observe(c.tick(time.Second), 10_000, acked); ch != stallUnchanged || st.Stalled {
			t.Fatalf("slow drain reported %v at %ds (%+v)", ch, i, st)
		}
	}
}

// TestIdleIsNoStall: no events in flight is never a stall, however long
// nothing is acknowledged, and an emptied window ends a stall.
func TestIdleIsNoStall(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	d := newStallDetector(2 * time.Second)
	for i := 0; i < 100; i++ {
		if st, ch := d.Observe(c.tick(time.Second), 0, 7); ch != stallUnchanged || st.Stalled {
			t.Fatalf("idle reported %v", ch)
		}
	}
	// Events arrive and wait: the timeout counts from the last empty window.
	for i := 1; ; i++ {
		_, ch := d.Observe(c.tick(time.Second), 3, 7)
		if ch == stallStalled {
			if i != 2 {
				t.Fatalf("stalled %ds after events arrived, want 2s", i)
			}
			break
		}
		if i > 10 {
			t.Fatal("never stalled")
		}
	}
	// A new stream (reconnect) starts with an empty window and a reset counter.
	if _, ch := d.Observe(c.tick(time.Second), 0, 0); ch != stallResumed {
		t.Fatalf("empty window after a stall: %v, want stallResumed", ch)
	}
}

func TestCounterRestartCountsAsProgress(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	d := newStallDetector(3 * time.Second)
	d.Observe(c.now, 5, 1000)
	d.Observe(c.tick(2*time.Second), 5, 1000)
	if st, ch := d.Observe(c.tick(2*time.Second), 5, 0); ch != stallUnchanged || st.Stalled {
		t.Fatalf("a restarted counter is progress: %v %+v", ch, st)
	}
}

func TestDisabled(t *testing.T) {
	c := &clock{now: time.Unix(1_700_000_000, 0)}
	d := newStallDetector(0)
	for i := 0; i < 1000; i++ {
		if st, ch := d.Observe(c.tick(time.Hour), 10, 1); ch != stallUnchanged || st.Stalled {
			t.Fatalf("disabled detector reported %v", ch)
		}
	}
}
