// The stall detector tells a stalled delivery from a slow one.
//
// The relay holds a bounded window of events Kafka has not acknowledged.
// When Kafka stops acknowledging (a frozen broker, an error every retry
// meets), the window fills, the replication stream stops reading, and
// nothing fails: retries go on quietly. A stallDetector watches the window's
// acknowledgement counter and calls delivery stalled when events are in
// flight and the counter has not moved for a timeout. Any advance, however
// small, is progress: a slow but moving drain is never a stall.

package relay

import "time"

// stallChange is what an observation changed.
type stallChange int

// Changes reported by Observe.
const (
	// stallUnchanged: still moving, or still stalled.
	stallUnchanged stallChange = iota
	// stallStalled: the timeout passed with events in flight and no
	// acknowledgement; report it once.
	stallStalled
	// stallResumed: acknowledgements moved again (or the window emptied) after
	// a stall; report it once.
	stallResumed
)

// stallDetector decides, from periodic samples of the in-flight window,
// whether delivery is stalled. It is not safe for concurrent use: one
// goroutine samples (the relay's observer); share its stallState instead.
type stallDetector struct {
	timeout time.Duration
	acked   int
	moved   time.Time // last acknowledgement advance, or an empty window
	seen    bool
	stalled bool
}

// newStallDetector returns a stallDetector that calls a stall after timeout without
// acknowledgements; timeout <= 0 disables it (it never reports a stall).
func newStallDetector(timeout time.Duration) *stallDetector { return &stallDetector{timeout: timeout} }

// stallState is a stallDetector's view after its last observation.
type stallState struct {
	Stalled bool
	// Inflight is the sample's count of unacknowledged events.
	Inflight int
	// LastProgress is when acknowledgements last advanced (or the window
	// was last empty); zero before the first observation.
	LastProgress time.Time
}

// Observe takes a sample at now: inflight unacknowledged events and
// acked, a counter of acknowledged events. The counter only has to
// change when events are acknowledged; it may restart (a new stream's
// window), since any change counts as progress.
func (d *stallDetector) Observe(now time.Time, inflight, acked int) (stallState, stallChange) {
	progress := !d.seen || acked != d.acked || inflight == 0
	d.seen, d.acked = true, acked
	if progress {
		d.moved = now
	}
	change := stallUnchanged
	switch {
	case d.stalled && progress:
		d.stalled = false
		change = stallResumed
	case !d.stalled && d.timeout > 0 && inflight > 0 && now.Sub(d.moved) >= d.timeout:
		d.stalled = true
		change = stallStalled
	}
	return stallState{Stalled: d.stalled, Inflight: inflight, LastProgress: d.moved}, change
}
