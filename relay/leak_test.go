package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/outbox-relay/outbox-relay/relay"
)

// noGoroutineLeft fails t when a goroutine is left that did not exist
// when before was taken (goleak.IgnoreCurrent, before the relay started):
// once Run returned, no goroutine of the relay may remain. goleak retries
// for about half a second, which lets goroutines that end by themselves
// finish (a context.AfterFunc callback, pgx and kafka-go closing a
// connection); a relay loop nobody waits for is caught by
// TestRunWaitsForItsLoops, which makes each loop take longer than that to
// end.
//
// The test's own pool (stack.db) existed before, and its readers ended
// before the check. No goroutine of another library needs ignoring: the
// relay closes its pgx pool, its lock connection and its kafka-go
// transports before Run returns, and none of these libraries keeps a
// process-wide goroutine.
func noGoroutineLeft(t *testing.T, before goleak.Option) {
	t.Helper()
	goleak.VerifyNone(t, before)
}

// TestRunWaitsForItsLoops: Run returns only after every loop it started
// ended - the statistics collector, the observer, the heartbeat, the
// cleanup schedule, the checkpoint saver and the stream's watchers - even
// one that takes a while to end. Per loop, one relay runs with that loop
// lingering for a second (longer than goleak's retries) once it ends: had
// its owner started it with a bare go statement and not waited for it,
// it would still be running when Run returns.
func TestRunWaitsForItsLoops(t *testing.T) {
	s := newStack(t, 1)
	s.cfg.Database.HeartbeatInterval = 50 * time.Millisecond
	s.cfg.Database.SlotCheckInterval = 50 * time.Millisecond
	s.cfg.Cleanup.OlderThan, s.cfg.Cleanup.Interval = time.Hour, 100*time.Millisecond
	s.cfg.Stats.Interval = 100 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	written := 0
	for _, loop := range relay.Loops {
		t.Run(loop, func(t *testing.T) {
			var exited atomic.Bool
			r := s.newRelay(loop)
			relay.OnLoopExit(r, func(l string) {
				if l == loop {
					// wall-clock: the loop must outlast goleak's retries, which run on the real clock.
					time.Sleep(time.Second)
					exited.Store(true)
				}
			})
			before := goleak.IgnoreCurrent()
			stop := start(r)
			defer stop()
			if err := s.write(ctx, 10, 2, 5, 0); err != nil {
				t.Fatal(err)
			}
			written += 10
			if !waitFor(20*time.Second, func() bool { return published(r) >= 10 }) {
				t.Fatalf("published %v events within 20s: %+v", published(r), r.Readiness())
			}
			// A few heartbeats, cleanup runs, scrapes and saves before the stop.
			// wall-clock: the loops work against the real servers and report no rounds to wait on.
			time.Sleep(200 * time.Millisecond)
			began := time.Now()
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !exited.Load() {
				t.Errorf("Run returned while its %s loop still ran", loop)
			}
			t.Logf("Run returned %s after its context ended", time.Since(began).Round(time.Millisecond))
			noGoroutineLeft(t, before)
		})
	}
	s.consume(ctx, written)
}
