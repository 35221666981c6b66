package backfill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Publisher is the relay's publisher (publisher.Publisher): it keeps the
// order of Publish calls per partition, retries transient failures and
// hands poison events to its quarantine.
type Publisher interface {
	Publish(ctx context.Context, ev *replication.WALEvent, ack publisher.Acker) error
	Fatal() <-chan error
}

// Stats describes a run.
type Stats struct {
	// Total is the number of rows counted in the selection before the run.
	Total int64
	// Read and Acked count events read from the table and taken care of
	// (acknowledged by Kafka, or dead-lettered/parked by the quarantine).
	Read, Acked int64
	Elapsed     time.Duration
}

// Rate is the acknowledged events per second so far.
func (s Stats) Rate() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Acked) / s.Elapsed.Seconds()
}

// Runner publishes a selection of rows.
type Runner struct {
	Source *Source
	Pub    Publisher
	// Window bounds the events in flight (default 5000).
	Window int
	// Progress, if set, is called every ProgressEvery (default 2s) and at
	// the end.
	Progress      func(Stats)
	ProgressEvery time.Duration
}

type ackFunc func()

func (f ackFunc) Ack(int) { f() }

// Run publishes the rows of w read through db, in order, and waits until
// every one is taken care of. total is reported in Stats (from Count).
func (r *Runner) Run(ctx context.Context, db DB, w Selection, total int64) (Stats, error) {
	window := r.Window
	if window <= 0 {
		window = 5000
	}
	every := r.ProgressEvery
	if every <= 0 {
		every = 2 * time.Second
	}
	acks := make(chan struct{}, window)
	st := Stats{Total: total}
	start := time.Now()
	last := start
	inflight := 0
	report := func(force bool) {
		if r.Progress != nil && (force || time.Since(last) >= every) {
			st.Elapsed = time.Since(start)
			r.Progress(st)
			last = time.Now()
		}
	}
	// wait takes acknowledgements until at most max events are in flight.
	wait := func(max int) error {
		for inflight > max {
			select {
			case <-acks:
				inflight--
				st.Acked++
			case err := <-r.Pub.Fatal():
				return fmt.Errorf("publish: %w", err)
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(every):
			}
			report(false)
		}
		return nil
	}
	err := r.Source.Scan(ctx, db, w, func(ev *replication.WALEvent) error {
		if err := wait(window - 1); err != nil {
			return err
		}
		inflight++
		st.Read++
		if err := r.Pub.Publish(ctx, ev, ackFunc(func() { acks <- struct{}{} })); err != nil {
			return fmt.Errorf("event %s (aggregate %s): %w", ev.EventID, ev.AggregateID, err)
		}
		report(false)
		return nil
	})
	if err == nil {
		err = wait(0)
	}
	st.Elapsed = time.Since(start)
	report(true)
	if err != nil && errors.Is(err, context.Canceled) {
		return st, fmt.Errorf("interrupted after %d of %d events: %w", st.Acked, total, err)
	}
	return st, err
}
