// Package backoff computes retry delays and waits them out. Every retry
// loop of the relay and the inbox uses it, so they all back off the same
// way: exponentially, capped, with full jitter.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Jitter returns the delay before retry number attempt (1-based): uniform
// in (0, min(base·2^(attempt-1), max)]. Full jitter spreads the retries of
// many lanes, consumers or standbys that failed together, so they do not
// hit a recovering broker or database in lockstep. It returns 0 when max
// is not positive.
func Jitter(attempt int, base, max time.Duration) time.Duration {
	d := base << min(max0(attempt-1), 20)
	if d <= 0 || d > max {
		d = max
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// Sleep waits for d, or until ctx is done, and reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
