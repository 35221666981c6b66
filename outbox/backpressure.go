package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ErrBackpressure is the sentinel every *BackpressureError wraps: Append
// refused the event because a back-pressure budget is crossed (see
// WithBackpressure). Nothing was written. The business transaction can
// fail fast (a 503 with Retry-After, a nack) or go on without the event;
// retrying at once does not help, the budget is about minutes or hours.
var ErrBackpressure = errors.New("outbox: back-pressure")

// BackpressureError says why Append refused an event: which budget is
// crossed and by which reading. It never carries the event or its
// payload, so it is safe to log and to return to callers. One value is
// built per reading and shared by every refusal until the next one (so a
// refusal allocates nothing): treat it as read-only.
type BackpressureError struct {
	// Level is BackpressureSoft (a non-critical event refused by
	// HealthConfig.Soft) or BackpressureHard (any event refused by
	// HealthConfig.Hard).
	Level string
	// Reasons name each crossed limit with the reading, e.g.
	// "retained WAL 130.0 MiB > 100.0 MiB".
	Reasons []string
	// Health is the reading the budget was evaluated on.
	Health Health

	// msg is Error's text, built once per reading so a refusal does not
	// format anything.
	msg string
}

// Error names the level, the crossed limits and the readings.
func (e *BackpressureError) Error() string {
	if e.msg != "" {
		return e.msg
	}
	return backpressureMessage("", e.Level, e.Reasons)
}

// Unwrap returns ErrBackpressure.
func (e *BackpressureError) Unwrap() error { return ErrBackpressure }

func backpressureMessage(slot, level string, reasons []string) string {
	var b strings.Builder
	b.WriteString(ErrBackpressure.Error())
	b.WriteString(": ")
	b.WriteString(level)
	b.WriteString(" budget crossed")
	if slot != "" {
		b.WriteString(" on slot ")
		b.WriteString(strconv.Quote(slot))
	}
	switch level {
	case BackpressureSoft:
		b.WriteString(" (non-critical events are refused)")
	case BackpressureHard:
		b.WriteString(" (every event is refused)")
	}
	if len(reasons) > 0 {
		b.WriteString(": ")
		b.WriteString(strings.Join(reasons, "; "))
	}
	return b.String()
}

// Budget is one level of back-pressure: the readings beyond which events
// are refused. Each limit is off by default: a zero field, or a negative
// one, is not checked, and a Budget that checks nothing never refuses.
// How to pick the values from the relay's forecast is in
// docs/operations.md ("Producer back-pressure budgets").
type Budget struct {
	// MinForecast is crossed when the WAL exhaustion forecast (the time
	// until the slot's retained WAL reaches safe_wal_size or
	// HealthConfig.DiskBudget at the recent growth rate) is below it. It
	// is the budget that acts in time: it sees the rate, not only the
	// level. 0 or negative: not checked.
	MinForecast time.Duration
	// MaxRetainedWAL is crossed when the slot retains more WAL bytes
	// (pg_current_wal_lsn() - restart_lsn). 0 or negative: not checked.
	MaxRetainedWAL int64
	// MaxOldestEvent is crossed when the oldest unacknowledged event is
	// older (Health.OldestUnacked says how that is measured). 0 or
	// negative: not checked.
	MaxOldestEvent time.Duration
}

// IsZero reports whether b checks nothing: every limit is zero or
// negative (off).
func (b Budget) IsZero() bool {
	return b.MinForecast <= 0 && b.MaxRetainedWAL <= 0 && b.MaxOldestEvent <= 0
}

// releaseMargin is the hysteresis of an engaged budget: it releases only
// once every reading is back inside the budget by 10% (retained WAL and
// event age below 90% of their limit, the forecast above the limit / 0.9).
// Retained WAL is a sawtooth (it drops when the relay confirms past a
// running-transactions record), so without a margin a reading near the
// limit would engage and release at every refresh, each time with a log
// line.
const releaseMargin = 0.9

// crossed returns the limits of b that h crosses, one reason each, or nil.
// engaged applies the release margin: a budget that is engaged stays so
// until the readings are back inside it by the margin. Unknown readings
// (a forecast or event age of -1) are not checked: an unknown number must
// not refuse events.
func (b Budget) crossed(h Health, engaged bool) []string {
	var reasons []string
	if b.MaxRetainedWAL > 0 {
		limit, what := b.MaxRetainedWAL, "budget"
		if engaged {
			limit, what = int64(float64(limit)*releaseMargin), "release point"
		}
		if h.RetainedWAL > limit {
			reasons = append(reasons, fmt.Sprintf("retained WAL %s > %s %s", formatBytes(h.RetainedWAL), what, formatBytes(limit)))
		}
	}
	if b.MinForecast > 0 && h.Forecast >= 0 {
		limit, what := b.MinForecast, "budget"
		if engaged {
			limit, what = time.Duration(float64(limit)/releaseMargin), "release point"
		}
		if h.Forecast < limit {
			reasons = append(reasons, fmt.Sprintf("WAL exhaustion forecast %s < %s %s", roundDuration(h.Forecast), what, roundDuration(limit)))
		}
	}
	if b.MaxOldestEvent > 0 && h.OldestUnacked >= 0 {
		limit, what := b.MaxOldestEvent, "budget"
		if engaged {
			limit, what = time.Duration(float64(limit)*releaseMargin), "release point"
		}
		if h.OldestUnacked > limit {
			reasons = append(reasons, fmt.Sprintf("oldest unacknowledged event %s > %s %s", roundDuration(h.OldestUnacked), what, roundDuration(limit)))
		}
	}
	return reasons
}

// formatBytes renders n in IEC units with one decimal ("130.0 MiB").
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB", "PiB"} {
		f /= unit
		if f < unit && f > -unit {
			return strconv.FormatFloat(f, 'f', 1, 64) + " " + u
		}
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " EiB"
}

// roundDuration keeps messages readable: whole seconds from a second on.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second || d <= -time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

// WithBackpressure makes Append and AppendBatch consult m before any SQL:
// while m's Soft budget is crossed, events of PriorityLow are refused
// with a *BackpressureError (errors.Is(err, ErrBackpressure)); while its
// Hard budget is crossed, every event is. The cost per Append is one
// atomic load (m.Check): m reads PostgreSQL on its own schedule (Run),
// never per event. Refused events are counted in Metrics
// (BackpressureRefused) by the Writer's WithMetrics.
//
// Without this option, or with a nil m, nothing is ever refused. A
// reading that is stale (m's refreshes failing for longer than three
// intervals) refuses nothing either: back-pressure must not turn a
// statistics query into an outage. A Writer option.
func WithBackpressure(m *HealthMonitor) Option {
	return optionFunc(func(o *options) { o.backpressure = m })
}

// admit is the back-pressure check of one event: nil, or the refusal,
// counted. Callers run it after validation and before any SQL.
func (w *Writer) admit(e *Event) *BackpressureError {
	if w.bp == nil {
		return nil
	}
	be := w.bp.refusal(e.Priority)
	if be != nil {
		w.metrics.BackpressureRefused(be.Level, e.EventType)
	}
	return be
}
