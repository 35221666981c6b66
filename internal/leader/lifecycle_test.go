package leader

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestKeepaliveDoesNotOutliveStop: stopping a lease's keepalive (the step
// Release takes before it unlocks and closes the connection) waits for a
// check still under way on the lock connection, and no check starts
// after it: the keepalive never uses a connection Release closed. Its
// check lingers on the fake clock (synctest), so a stop that did not wait
// returns while the check is still inside.
func TestKeepaliveDoesNotOutliveStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var inside, checks atomic.Int32
		l := fakeLease(time.Now(), func(ctx context.Context) (bool, error) {
			checks.Add(1)
			inside.Add(1)
			defer inside.Add(-1)
			time.Sleep(2 * time.Second) // a slow answer, within the check's deadline
			return true, nil
		})
		time.Sleep(1500 * time.Millisecond) // the first tick's check is under way
		if inside.Load() != 1 {
			t.Fatalf("%d checks under way, want 1", inside.Load())
		}
		stopFake(l)
		if n := inside.Load(); n != 0 {
			t.Fatalf("stop returned with %d check(s) still on the lock connection", n)
		}
		n := checks.Load()
		time.Sleep(10 * time.Second) // ticks that a leftover keepalive would take
		if m := checks.Load(); m != n {
			t.Fatalf("%d checks after stop", m-n)
		}
		if l.Err() != nil {
			t.Fatalf("lease ended by stopping its keepalive: %v", l.Err())
		}
	})
}
