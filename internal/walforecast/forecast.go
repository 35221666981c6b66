// Package walforecast forecasts the time until a replication slot's
// retained WAL reaches its limit: safe_wal_size (max_slot_wal_keep_size)
// and/or a configured disk budget. It is the one implementation behind the
// relay's outbox_relay_slot_wal_exhaustion_seconds (internal/pgstats) and
// the producer's back-pressure reading (outbox.HealthMonitor), so both
// show the same number for the same samples.
//
// It has no dependencies beyond the standard library on purpose: package
// outbox, which applications import, must not pull in Prometheus.
//
// The forecast divides the headroom — safe_wal_size and/or the disk
// budget minus the retained WAL, whichever is smaller — by the retained
// WAL's growth rate, a least-squares fit over the samples of the last
// window (DefaultWindow). It is +Inf while the retained WAL does not grow,
// 0 once the headroom is used up, and absent when there is no limit to
// reach or fewer than two samples.
package walforecast

import (
	"math"
	"time"
)

// DefaultWindow is the span of samples the growth rate is fitted over:
// long enough to smooth the sawtooth of a slot that confirms now and then,
// short enough to follow an outage that just began.
const DefaultWindow = 5 * time.Minute

// Sample is one observation of a slot's retained WAL (bytes behind
// restart_lsn), the series the forecast extrapolates.
type Sample struct {
	At       time.Time
	Retained int64
}

// GrowthRate is the least-squares slope of the samples' retained WAL over
// time, in bytes per second. A fit rather than first-to-last difference,
// so a single sample taken just after a checkpoint or a burst does not
// swing the forecast. ok is false with fewer than two samples or when they
// span no time.
func GrowthRate(samples []Sample) (rate float64, ok bool) {
	if len(samples) < 2 {
		return 0, false
	}
	t0 := samples[0].At
	var n, sx, sy, sxx, sxy float64
	for _, s := range samples {
		x := s.At.Sub(t0).Seconds()
		y := float64(s.Retained)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	den := n*sxx - sx*sx
	if den <= 0 || math.IsNaN(den) {
		return 0, false
	}
	return (n*sxy - sx*sy) / den, true
}

// Limits are what the retained WAL must stay under.
type Limits struct {
	// SafeWALSize is pg_replication_slots.safe_wal_size: bytes that can
	// still be written before the slot is invalidated. nil when
	// max_slot_wal_keep_size is unlimited. Negative once exceeded
	// (wal_status unreserved).
	SafeWALSize *int64
	// DiskBudget is the configured bytes the slot may retain
	// (--wal-disk-budget); 0 for none.
	DiskBudget int64
}

// Forecast returns the seconds until the retained WAL (the last sample)
// reaches the nearest limit at the samples' growth rate:
//
//   - ok false: no limit at all, or fewer than two samples (no rate yet)
//     while a limit is still ahead;
//   - 0: a limit is already reached;
//   - +Inf: the retained WAL is not growing (rate <= 0);
//   - otherwise headroom / rate.
//
// The headroom is min(SafeWALSize, DiskBudget - retained) over the limits
// that are set. safe_wal_size shrinks as WAL is written while restart_lsn
// stands still, which is exactly when retained WAL grows, so both
// headrooms shrink at the retained WAL's rate.
func Forecast(samples []Sample, lim Limits) (seconds float64, ok bool) {
	if len(samples) == 0 {
		return 0, false
	}
	retained := samples[len(samples)-1].Retained
	headroom, limited := int64(math.MaxInt64), false
	if lim.SafeWALSize != nil {
		headroom, limited = *lim.SafeWALSize, true
	}
	if lim.DiskBudget > 0 {
		headroom, limited = min(headroom, lim.DiskBudget-retained), true
	}
	if !limited {
		return 0, false
	}
	if headroom <= 0 {
		return 0, true
	}
	rate, ok := GrowthRate(samples)
	switch {
	case !ok:
		return 0, false
	case rate <= 0:
		return math.Inf(1), true
	}
	return float64(headroom) / rate, true
}

// History keeps the samples of the last window (at least the last two,
// so a window shorter than the sampling interval still yields a rate).
// The zero value uses DefaultWindow. Not safe for concurrent use.
type History struct {
	// Window is the span kept; <= 0 means DefaultWindow.
	Window  time.Duration
	samples []Sample
}

// Add appends s (samples must come in time order) and returns the
// samples of the window, s included. The slice is reused by the next Add.
func (h *History) Add(s Sample) []Sample {
	window := h.Window
	if window <= 0 {
		window = DefaultWindow
	}
	h.samples = append(h.samples, s)
	cut := 0
	for cut < len(h.samples)-2 && s.At.Sub(h.samples[cut].At) > window {
		cut++
	}
	h.samples = append(h.samples[:0], h.samples[cut:]...)
	return h.samples
}

// Reset forgets every sample: after the slot was lost, dropped or stopped
// retaining WAL, old samples say nothing about the new growth.
func (h *History) Reset() { h.samples = h.samples[:0] }
