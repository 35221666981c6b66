package relay

// This file holds the observer (observe): the loop of one goroutine, the
// startstop service services.observer, which Run starts once Kafka
// answered and stops (waiting for it) before it returns. Once a second it
// reads the current tracker (r.tracker, an atomic pointer the stream
// stores) and r.streaming, feeds the stall detector (r.stalls, which only
// this goroutine observes) and sets the window's gauges.

import (
	"context"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
)

// observe copies the window's state into gauges.
func (r *Relay) observe(ctx context.Context) {
	defer r.loopExit("observer")
	every(ctx, time.Second, func() bool {
		tr := r.tracker.Load()
		if tr == nil {
			return true
		}
		s := tr.Stats()
		r.registryOut.observe(tr, s.Acked, r.log, time.Now())
		if r.streaming.Load() {
			r.stalls.observe(time.Now(), s)
		} else {
			r.stalls.observe(time.Now(), checkpoint.WindowStats{})
		}
		r.m.InflightEvents.Set(float64(s.Events))
		r.m.InflightBytes.Set(float64(s.Bytes))
		r.m.CheckpointHeld.Set(float64(s.Held))
		if s.OldestCommit.IsZero() {
			r.m.OldestUnackedAge.Set(0)
		} else {
			r.m.OldestUnackedAge.Set(time.Since(s.OldestCommit).Seconds())
		}
		return true
	})
}
