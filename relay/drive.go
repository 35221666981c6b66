package relay

// This file holds drive, which runs a started replication stream on its
// caller's goroutine (stream's, under lead) until it drains, the
// leadership ends or a permanent failure cancels it. drive owns three
// goroutines, each a startstop service it starts under the stream's
// context and stops (waiting for it) before it returns: the publisher
// watch (reads Publisher.Fatal), the slot watch (watchSlot, slotwatch.go)
// and the stop watch (closes stop once Run's context ends, so the stream
// drains). The first two report a failure through setFatal, which stores
// it once in failed and cancels the stream; drive reads failed only after
// all three stopped.

import (
	"context"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// drive runs the started stream s until the end of ctx has drained it,
// the leadership ends (streamCtx) or a permanent failure of the publisher
// or the slot cancels it; fatal is that failure. Its watchers are
// services stopped before it returns: no slot query of this stream runs
// after it, and no failure is reported once fatal has been read.
func (r *Relay) drive(ctx, streamCtx context.Context, cancel context.CancelFunc, s *replication.Stream,
	pub *publisher.Publisher, tracker *checkpoint.Tracker, start pglogrepl.LSN) (fatal, err error) {
	r.m.ReplicationStarts.Inc()
	r.m.ReplicationUp.Set(1)
	defer r.m.ReplicationUp.Set(0)
	r.streaming.Store(true)
	defer r.streaming.Store(false)
	r.log.Info("streaming", slog.String("stage", "stream"), slog.String("start_lsn", start.String()))

	var failed atomic.Pointer[error]
	setFatal := func(err error) {
		failed.CompareAndSwap(nil, &err)
		cancel()
	}
	fatalWatch := startstop.New(func(wctx context.Context) {
		defer r.loopExit("publisher watch")
		select {
		case err := <-pub.Fatal():
			setFatal(err)
		case <-wctx.Done():
		}
	})
	slotWatch := startstop.New(func(wctx context.Context) { r.watchSlot(wctx, setFatal) })
	// stop asks s to drain once ctx ends (SIGTERM).
	stop := make(chan struct{})
	stopWatch := startstop.New(func(wctx context.Context) {
		defer r.loopExit("stop watch")
		select {
		case <-ctx.Done():
			close(stop)
		case <-wctx.Done():
		}
	})
	for _, w := range []*startstop.Service{fatalWatch, slotWatch, stopWatch} {
		w.Start(streamCtx)
	}
	idle := func() bool { return tracker.Stats().Events == 0 }
	err = s.Run(streamCtx, stop, r.cfg.ShutdownTimeout, idle)
	cancel()
	startstop.StopAll(fatalWatch, slotWatch, stopWatch)
	if f := failed.Load(); f != nil {
		return *f, err
	}
	return nil, err
}
