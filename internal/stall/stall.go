// Package stall tells a stalled delivery from a slow one.
//
// The relay holds a bounded window of events Kafka has not acknowledged.
// When Kafka stops acknowledging (a frozen broker, an error every retry
// meets), the window fills, the replication stream stops reading, and
// nothing fails: retries go on quietly. A Detector watches the window's
// acknowledgement counter and calls delivery stalled when events are in
// flight and the counter has not moved for a timeout. Any advance, however
// small, is progress: a slow but moving drain is never a stall.
package stall

import "time"

// Change is what an observation changed.
type Change int

// Changes reported by Observe.
const (
	// Unchanged: still moving, or still stalled.
	Unchanged Change = iota
	// Stalled: the timeout passed with events in flight and no
	// acknowledgement; report it once.
	Stalled
	// Resumed: acknowledgements moved again (or the window emptied) after
	// a stall; report it once.
	Resumed
)

// Detector decides, from periodic samples of the in-flight window,
// whether delivery is stalled. It is not safe for concurrent use: one
// goroutine samples (the relay's observer); share its State instead.
type Detector struct {
	timeout time.Duration
	acked   int
	moved   time.Time // last acknowledgement advance, or an empty window
	seen    bool
	stalled bool
}

// New returns a Detector that calls a stall after timeout without
// acknowledgements; timeout <= 0 disables it (it never reports a stall).
func New(timeout time.Duration) *Detector { return &Detector{timeout: timeout} }

// State is a Detector's view after its last observation.
type State struct {
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
func (d *Detector) Observe(now time.Time, inflight, acked int) (State, Change) {
	progress := !d.seen || acked != d.acked || inflight == 0
	d.seen, d.acked = true, acked
	if progress {
		d.moved = now
	}
	change := Unchanged
	switch {
	case d.stalled && progress:
		d.stalled = false
		change = Resumed
	case !d.stalled && d.timeout > 0 && inflight > 0 && now.Sub(d.moved) >= d.timeout:
		d.stalled = true
		change = Stalled
	}
	return State{Stalled: d.stalled, Inflight: inflight, LastProgress: d.moved}, change
}
