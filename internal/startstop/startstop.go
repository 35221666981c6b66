// Package startstop makes a background loop a small service that its
// owner starts and waits for, after the startstop package of
// riverqueue/river: Start runs the loop in a goroutine, Stop cancels the
// loop's context and returns only once the loop has returned.
//
// The point is that an owner never returns while a loop it started still
// runs. A goroutine started with a bare go statement may outlive the
// function that started it: it may then still use a connection pool its
// owner closed, or still write to the database after the owner returned -
// and an owner started again in the same process would run two copies of
// the loop side by side. Every loop of the relay and the inbox is one of
// these services, stopped (and so waited for) before its owner returns.
package startstop

import (
	"context"
	"sync"
)

// Service is a background loop: f runs in its own goroutine from Start
// until its context ends, which Stop brings about. f must return soon
// after its context ends.
//
// A Service is safe for concurrent use. Start while it runs (or is being
// stopped) does nothing; Stop is idempotent, and Stop on a Service never
// started returns at once. After Stop has returned, Start runs f again, so
// two copies of f never run at once. The zero Service is not usable: use
// New.
type Service struct {
	f func(ctx context.Context)

	mu     sync.Mutex
	cancel context.CancelFunc // nil: not running
	done   chan struct{}      // closed when the running f returns
}

// New returns a stopped service running f.
func New(f func(ctx context.Context)) *Service {
	done := make(chan struct{})
	close(done)
	return &Service{f: f, done: done}
}

// Start runs f in a goroutine with a context derived from ctx: f's
// context ends when ctx does or when Stop is called. It reports whether it
// started f (false: f was running already). A loop that ends by itself,
// because ctx ended or f returned, must still be stopped (or waited for)
// by its owner; Start does not block.
func (s *Service) Start(ctx context.Context) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cancel != nil {
		return false
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.cancel, s.done = cancel, done
	go func() {
		defer close(done)
		s.f(ctx)
	}()
	return true
}

// Stop cancels f's context and waits until f has returned. It is
// idempotent and may be called concurrently; every call returns only
// after f has returned.
func (s *Service) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
	s.mu.Lock()
	if s.done == done { // not started again meanwhile
		s.cancel = nil
	}
	s.mu.Unlock()
}

// Wait waits until f has returned, without cancelling it (for a loop that
// ends by itself). It returns at once when the service is not running.
func (s *Service) Wait() { <-s.Done() }

// Done is closed once the f of the last Start has returned (it is closed
// already before the first Start).
func (s *Service) Done() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done
}

// StopAll stops the services in reverse order (the last started first)
// and returns when all of them have stopped. nil entries are skipped.
func StopAll(services ...*Service) {
	for i := len(services) - 1; i >= 0; i-- {
		if services[i] != nil {
			services[i].Stop()
		}
	}
}
