package startstop

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

// Every test here must leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lingering is a loop that takes a while to return after its context
// ends, as one finishing a database call would: Stop must wait for it.
// The tests using it run in synctest bubbles, where the linger is on the
// fake clock: it passes only once every other goroutine is blocked, so a
// Stop or Wait that did not wait has returned (and been caught) by then.
type lingering struct {
	running, starts atomic.Int32
	exited          atomic.Bool
}

func (l *lingering) run(ctx context.Context) {
	l.starts.Add(1)
	if l.running.Add(1) > 1 {
		panic("two copies of the loop run at once")
	}
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond) // virtual time (synctest)
	l.running.Add(-1)
	l.exited.Store(true)
}

func TestStopWaitsForTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lingering
		s := New(l.run)
		if !s.Start(context.Background()) {
			t.Fatal("Start did not start a stopped service")
		}
		if s.Start(context.Background()) {
			t.Fatal("Start started a running service again")
		}
		s.Stop()
		if !l.exited.Load() {
			t.Fatal("Stop returned before the loop did")
		}
		s.Stop() // idempotent
		if n := l.starts.Load(); n != 1 {
			t.Fatalf("loop started %d times, want 1", n)
		}
	})
}

func TestConcurrentStopsAllWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lingering
		s := New(l.run)
		s.Start(context.Background())
		var wg sync.WaitGroup
		var early atomic.Int32
		for range 8 {
			wg.Go(func() {
				s.Stop()
				if !l.exited.Load() {
					early.Add(1)
				}
			})
		}
		wg.Wait()
		if n := early.Load(); n != 0 {
			t.Fatalf("%d of 8 concurrent Stops returned before the loop did", n)
		}
	})
}

func TestStopNeverStarted(t *testing.T) {
	s := New(func(context.Context) { t.Error("loop ran") })
	s.Stop()
	s.Wait()
	select {
	case <-s.Done():
	default:
		t.Fatal("Done of a service never started is open")
	}
}

func TestRestartAfterStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lingering
		s := New(l.run)
		for range 3 {
			s.Start(context.Background())
			s.Stop()
		}
		if n := l.starts.Load(); n != 3 {
			t.Fatalf("loop started %d times, want 3", n)
		}
	})
}

// A loop ends with its parent context; Wait and Done see it end, and
// Stop afterwards returns at once.
func TestParentContextEndsTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l lingering
		s := New(l.run)
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx)
		select {
		case <-s.Done():
			t.Fatal("Done closed while the loop runs")
		default:
		}
		cancel()
		s.Wait()
		if !l.exited.Load() {
			t.Fatal("Wait returned before the loop did")
		}
		<-s.Done()
		s.Stop()
	})
}

func TestStopAllReverseOrder(t *testing.T) {
	var mu sync.Mutex
	var order []string
	loop := func(name string) *Service {
		return New(func(ctx context.Context) {
			<-ctx.Done()
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		})
	}
	a, b := loop("a"), loop("b")
	a.Start(context.Background())
	b.Start(context.Background())
	StopAll(a, nil, b)
	if len(order) != 2 || order[0] != "b" || order[1] != "a" {
		t.Fatalf("stopped in order %v, want [b a]", order)
	}
}
