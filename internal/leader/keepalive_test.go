package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeLease is a Lease whose lock check is held: no connection.
func fakeLease(acquired time.Time, held func(context.Context) (bool, error)) *Lease {
	e := &Elector{cfg: Config{PollInterval: 2 * time.Second, KeepaliveInterval: time.Second, Timeout: 10 * time.Second},
		log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{e: e, ctx: ctx, cancel: cancel, stop: make(chan struct{}), done: make(chan struct{}),
		confirm: make(chan chan error), held: held}
	return l.start(acquired)
}

// stopFake ends a fake lease's keepalive (Release would unlock on the
// connection it does not have).
func stopFake(l *Lease) {
	close(l.stop)
	<-l.done
}

// answer is a server that answers at once, while the check's context
// lives.
func answer(held bool, err error, calls *atomic.Int32) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		calls.Add(1)
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return held, err
	}
}

// TestKeepaliveRunLateAsksTheServer: a keepalive that runs long after the
// last confirmation (the process or the machine stalled, as in the
// black-box run where a loaded machine held the relay for 35 s while Kafka
// struggled) asks the server instead of failing on a deadline that passed
// while it waited; only the server's answer ends the lease (issue 36).
func TestKeepaliveRunLateAsksTheServer(t *testing.T) {
	for _, c := range []struct {
		name    string
		held    bool
		err     error
		wantErr bool
	}{
		{"still held", true, nil, false},
		{"freed", false, nil, true},
		{"session ended", false, errors.New("conn closed"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls atomic.Int32
				// Last confirmed 35 s ago: the deadline Timeout/2 after it has passed.
				l := fakeLease(time.Now().Add(-35*time.Second), answer(c.held, c.err, &calls))
				defer stopFake(l)
				time.Sleep(1500 * time.Millisecond) // the first keepalive tick
				if calls.Load() == 0 {
					t.Fatal("the server was not asked")
				}
				if got := l.Err(); (got != nil) != c.wantErr {
					t.Fatalf("lease error %v, want error: %v", got, c.wantErr)
				}
				if !c.wantErr {
					time.Sleep(5 * time.Second) // on time again: checks keep confirming
					if l.Err() != nil || calls.Load() < 5 {
						t.Fatalf("after the late check: %v, %d checks", l.Err(), calls.Load())
					}
				}
			})
		})
	}
}

// TestKeepaliveSilentServerStillLosesInTime: on time, a server that does
// not answer ends the lease Timeout/2 after the last confirmation, before
// the server frees the lock (Timeout): the extension is for a late
// goroutine only.
func TestKeepaliveSilentServerStillLosesInTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		l := fakeLease(start, func(ctx context.Context) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		})
		defer stopFake(l)
		<-l.Context().Done()
		if lost := time.Since(start); lost > 5*time.Second {
			t.Fatalf("lease lost %s after the last confirmation, want at most Timeout/2 (5s)", lost)
		}
	})
}
