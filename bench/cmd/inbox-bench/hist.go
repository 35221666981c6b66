package main

import (
	"math"
	"sync/atomic"
)

// Bounds of ageHist: bucket i ≥ 1 holds ages in [histLow·histGrowth^(i-1),
// histLow·histGrowth^i); bucket 0 everything below histLow, the last one
// everything above.
const (
	histLow     = 100e-6 // 0.1 ms: Kafka timestamps are whole milliseconds anyway
	histGrowth  = 1.01   // 1 % relative precision
	histBuckets = 1700   // up to about 2,000 s
)

// ageHist counts event ages (seconds) in fixed logarithmic buckets. The
// consumer child keeps it instead of every sample, so its memory does not
// grow with N and the RSS measurement stays the consumer's. Safe for
// concurrent use (partitions apply in parallel).
type ageHist struct {
	counts [histBuckets]atomic.Int64
	n      atomic.Int64
	max    atomic.Uint64 // float64 bits
}

func bucketOf(v float64) int {
	if !(v >= histLow) { // also NaN, negative (clock skew)
		return 0
	}
	i := 1 + int(math.Floor(math.Log(v/histLow)/math.Log(histGrowth)))
	return min(i, histBuckets-1)
}

// upperBound is the upper end of bucket i.
func upperBound(i int) float64 {
	if i >= histBuckets-1 {
		return math.Inf(1)
	}
	return histLow * math.Pow(histGrowth, float64(i))
}

func (h *ageHist) observe(v float64) {
	h.counts[bucketOf(v)].Add(1)
	h.n.Add(1)
	for {
		old := h.max.Load()
		if v <= math.Float64frombits(old) || h.max.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}

func (h *ageHist) count() int64 { return h.n.Load() }

func (h *ageHist) maxSeen() float64 { return math.Float64frombits(h.max.Load()) }

// quantile is the nearest-rank q-quantile, reported as the upper bound of
// its bucket (at most 1 % high), capped at the largest age seen.
func (h *ageHist) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return math.NaN()
	}
	rank := max(int64(math.Ceil(q*float64(n))), 1)
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return math.Min(upperBound(i), h.maxSeen())
		}
	}
	return h.maxSeen()
}
