package backoff

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestJitter(t *testing.T) {
	base, maxD := 100*time.Millisecond, 2*time.Second
	for attempt := 1; attempt <= 40; attempt++ {
		bound := min(base<<min(attempt-1, 20), maxD)
		var top time.Duration
		for range 200 {
			d := Jitter(attempt, base, maxD)
			if d <= 0 || d > bound {
				t.Fatalf("attempt %d: %s outside (0, %s]", attempt, d, bound)
			}
			top = max(top, d)
		}
		if top < bound/2 {
			t.Errorf("attempt %d: largest of 200 delays %s, want near %s (is it jittered over the whole range?)", attempt, top, bound)
		}
	}
	if d := Jitter(1, 0, 0); d != 0 {
		t.Errorf("no max: %s, want 0", d)
	}
	if d := Jitter(0, base, maxD); d <= 0 || d > base {
		t.Errorf("attempt 0: %s, want (0, %s]", d, base)
	}
}

// TestSleep runs in virtual time (synctest): the hour a Sleep ignoring
// its context would wait passes at once, and the full wait is exact.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if !Sleep(context.Background(), time.Millisecond) {
			t.Fatal("Sleep reported a cancellation")
		}
		if d := time.Since(start); d != time.Millisecond {
			t.Fatalf("Sleep(1ms) returned after %s", d)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		t0 := time.Now()
		if Sleep(ctx, time.Hour) || time.Since(t0) > time.Second {
			t.Fatal("Sleep ignored a cancelled context")
		}
		// Cancelled while sleeping: Sleep ends with the context.
		ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
		defer cancel2()
		t1 := time.Now()
		if Sleep(ctx2, time.Hour) || time.Since(t1) != time.Second {
			t.Fatalf("Sleep(1h) with a context ending after 1s returned after %s", time.Since(t1))
		}
	})
}
