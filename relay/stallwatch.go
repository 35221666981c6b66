package relay

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// stallWatch turns the stall detector's verdicts into what an operator
// sees: one error log when delivery stalls (with the last publish failure
// as its cause), one info log when it clears, the outbox_relay_stalled
// gauge, and the reason /readyz answers with. The observer goroutine calls
// observe; readiness reads reason from any goroutine.
type stallWatch struct {
	det      *stallDetector
	log      *slog.Logger
	m        *metrics.Relay
	failures *lastFailure
	// stalledAt is when the current stall was reported (observer only).
	stalledAt time.Time
	// current is the /readyz reason while stalled, nil otherwise.
	current atomic.Pointer[string]
}

func newStallWatch(timeout time.Duration, log *slog.Logger, m *metrics.Relay, failures *lastFailure) *stallWatch {
	return &stallWatch{det: newStallDetector(timeout), log: log, m: m, failures: failures}
}

// reason is the stall reason for /readyz, empty when not stalled.
func (w *stallWatch) reason() string {
	if p := w.current.Load(); p != nil {
		return *p
	}
	return ""
}

// observe samples the window (s is zero while no stream runs: nothing can
// be acknowledged then, and /readyz already says why).
func (w *stallWatch) observe(now time.Time, s checkpoint.WindowStats) {
	// Acknowledgements held for a checkpoint save count as in flight: a
	// save that never ends stops the stream with nothing else in flight.
	st, change := w.det.Observe(now, s.Events+s.Held, s.Acked)
	switch change {
	case stallStalled:
		w.stalledAt = now
		f := w.failures.Load()
		attrs := []slog.Attr{slog.String("stage", "stall"), slog.Int("inflight", st.Inflight), slog.Int("held_for_checkpoint", s.Held),
			slog.Duration("since_ack", now.Sub(st.LastProgress))}
		if f != nil && !f.At.Before(st.LastProgress) {
			attrs = append(attrs, slog.String("topic", f.Topic), slog.Int("partition", f.Partition), slog.String("class", string(f.Class)),
				slog.String("reason", f.Reason), slog.Int("attempt", f.Attempt), slog.String("event_id", f.EventID),
				slog.String("aggregate_id", f.AggregateID), slog.String("event_type", f.EventType), slog.Any("last_error", f.Err))
		}
		w.log.LogAttrs(context.Background(), slog.LevelError,
			"delivery stalled: events in flight and no acknowledgement for Window.StallTimeout; the slot position is held", attrs...)
		w.m.Stalled.Set(1)
	case stallResumed:
		cause := "acknowledgements resumed"
		if st.Inflight == 0 {
			cause = "no events in flight"
		}
		w.log.Info("delivery stall cleared", slog.String("stage", "stall"), slog.String("cause", cause), slog.Duration("stalled_for", now.Sub(w.stalledAt)))
		w.m.Stalled.Set(0)
		w.current.Store(nil)
	}
	if st.Stalled {
		r := stallReason(now, st, w.failures.Load())
		if s.Held > 0 {
			r += fmt.Sprintf("; %d of the events in flight are acknowledged and wait for a checkpoint save (a lock on the checkpoint table? a synchronous standby down?)", s.Held)
		}
		w.current.Store(&r)
	}
}

// stallReason is the /readyz reason of a stall: how long, how much, and
// the last failure seen since acknowledgements stopped.
func stallReason(now time.Time, st stallState, f *publisher.Failure) string {
	cause := "none since the last acknowledgement: writes are waiting for Kafka's answer (an unresponsive broker?)"
	if f != nil && !f.At.Before(st.LastProgress) {
		where := fmt.Sprintf("%s[%d]", f.Topic, f.Partition)
		if f.Partition < 0 {
			where = "topic " + f.Topic + " metadata"
		}
		cause = fmt.Sprintf("%s (%s) on %s, attempt %d, %s ago: %v", f.Reason, f.Class, where, f.Attempt,
			now.Sub(f.At).Round(time.Second), f.Err)
	}
	return fmt.Sprintf("stalled: no acknowledgement for %s with %d events in flight; last error: %s",
		now.Sub(st.LastProgress).Round(time.Second), st.Inflight, cause)
}

// lastFailure keeps the most recent publisher.Failure of any stream's
// publisher (their failure hook, WithFailureHook): written on the failure
// path only, never per event, and read by the stall watch. It is nil-safe
// and safe for concurrent use.
type lastFailure struct {
	p atomic.Pointer[publisher.Failure]
}

// record stores f as the most recent failure.
func (l *lastFailure) record(f publisher.Failure) {
	if l != nil {
		l.p.Store(&f)
	}
}

// Load returns the most recent failure, nil when none was recorded.
func (l *lastFailure) Load() *publisher.Failure {
	if l == nil {
		return nil
	}
	return l.p.Load()
}
