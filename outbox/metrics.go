package outbox

// Metrics receives the producer side's measurements. Package outboxprom
// implements it with Prometheus collectors (outbox_producer_*), so that
// package outbox itself does not depend on Prometheus; nil (the default)
// measures nothing. Labels are the caller's types and fixed levels, never
// ids, so their number stays bounded. Methods must not block: they run on
// the caller's goroutines, inside its transactions.
type Metrics interface {
	// TransitionConflict counts a Transition whose conditional change
	// matched no row: a concurrent command changed the aggregate first, or
	// the command was not valid in the aggregate's state.
	TransitionConflict(aggregateType, eventType string)
	// BackpressureRefused counts an Append refused with ErrBackpressure at
	// a level (BackpressureSoft for non-critical events, BackpressureHard
	// for critical ones).
	BackpressureRefused(level, eventType string)
	// BackpressureEngaged reports that back-pressure engaged (true) or
	// released (false) at a level.
	BackpressureEngaged(level string, engaged bool)
}

// Back-pressure levels, as reported to Metrics and in BackpressureError.
const (
	// BackpressureSoft refuses non-critical events (Event.Priority
	// PriorityLow) once HealthConfig.Soft is crossed.
	BackpressureSoft = "soft"
	// BackpressureHard refuses every event, critical ones too, once the
	// optional HealthConfig.Hard is crossed: the point where the service
	// would rather stop writing than risk the database's disk.
	BackpressureHard = "hard"
)

// nopMetrics measures nothing.
type nopMetrics struct{}

func (nopMetrics) TransitionConflict(string, string)  {}
func (nopMetrics) BackpressureRefused(string, string) {}
func (nopMetrics) BackpressureEngaged(string, bool)   {}

// WithMetrics reports measurements to m: a Writer's transition conflicts
// and refused events (TransitionConflict, BackpressureRefused), a
// HealthMonitor's engaged and released levels (BackpressureEngaged). Give
// the same m to the monitor and to its Writers; outboxprom.New gives the
// Prometheus collectors (outbox_producer_*). The default measures nothing,
// and a nil m changes nothing. An option of both a Writer and a
// HealthMonitor.
func WithMetrics(m Metrics) Option {
	return optionFunc(func(o *options) {
		if m != nil {
			o.metrics = m
		}
	})
}
