package publisher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/outbox-relay/outbox-relay/replication"
)

// SyncWriter writes single events synchronously, for operator commands
// (dlq retry) that must know each event's outcome before the next. It is
// a Publisher underneath, built from the same Config and options as the
// relay's: the same record format and partitioning (acks=all, murmur2 on
// aggregate_id), the idempotent producer, the reserved topics. It is not
// safe for concurrent use.
type SyncWriter struct {
	newPub func(hook Option) *Publisher
	pub    *Publisher
	// attempts bounds the failed attempts of one event before Write gives
	// up on it as transient.
	attempts int

	// mu guards the failures of the current publisher, which its
	// goroutines report (WithFailureHook).
	mu        sync.Mutex
	last      *Failure
	failed    int
	exhausted chan struct{} // closed at the attempts-th failure
}

// NewSyncWriter returns a writer of cfg to brokers, wired by opts as New's
// publishers are. WithDeadLetters and WithTransactions are refused (every
// Write fails): an operator command reports a poison event instead of
// dead-lettering it, and writes outside transactions.
func NewSyncWriter(brokers []string, cfg Config, opts ...Option) *SyncWriter {
	return &SyncWriter{attempts: 5, newPub: func(hook Option) *Publisher {
		p := New(brokers, cfg, append(slices.Clone(opts), hook)...)
		if p.cfg.DeadLetters != nil || p.cfg.Transactions != nil {
			p.cfgErr = errors.New("a SyncWriter takes no dead letters and no transactions")
		}
		return p
	}}
}

// syncAck is the acknowledgement of the one event a Write waits for.
type syncAck chan struct{}

func (a syncAck) Ack(int) { close(a) }

// Write publishes ev and waits until Kafka acknowledged it, retrying
// transient failures (with the Config's backoff) for up to 5 attempts. The
// error of a failed write says whether it is permanent. After a failure
// the publisher underneath is closed, so nothing of ev is retried behind
// the caller's back; the next Write starts a new one.
func (s *SyncWriter) Write(ctx context.Context, ev *replication.WALEvent) error {
	if s.pub == nil {
		s.mu.Lock()
		s.last, s.failed, s.exhausted = nil, 0, make(chan struct{})
		s.mu.Unlock()
		s.pub = s.newPub(WithFailureHook(s.record))
	}
	ack := make(syncAck)
	if err := s.pub.Publish(ctx, ev, ack); err != nil {
		s.reset()
		var ee *EventError
		if errors.As(err, &ee) {
			return errors.New(ee.Reason)
		}
		return err
	}
	select {
	case <-ack:
		return nil
	case err := <-s.pub.Fatal():
		s.reset()
		return fmt.Errorf("%w (permanent)", err)
	case <-ctx.Done():
		s.reset()
		return ctx.Err()
	case <-s.exhausted:
		s.mu.Lock()
		f := *s.last
		s.mu.Unlock()
		s.reset()
		return fmt.Errorf("%s (%s, gave up after %d attempts): %w", f.Reason, f.Class, s.attempts, f.Err)
	}
}

// record is the publisher's failure hook.
func (s *SyncWriter) record(f Failure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = &f
	if s.failed++; s.failed == s.attempts {
		close(s.exhausted)
	}
}

// reset closes the current publisher: whatever it still holds is dropped.
func (s *SyncWriter) reset() {
	if s.pub != nil {
		_ = s.pub.Close()
		s.pub = nil
	}
}

// Close releases the writer's connections.
func (s *SyncWriter) Close() error {
	s.reset()
	return nil
}
