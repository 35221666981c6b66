package relay

// This file holds waitForKafka, which runs on Run's goroutine before the
// relay campaigns: it has no goroutine of its own, and the publisher it
// pings with is closed (its goroutines stopped) before it returns.

import (
	"context"
	"log/slog"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// waitForKafka retries until a broker answers, so a relay started before
// Kafka waits instead of crash-looping. It returns false on shutdown, and
// an error for a failure no retry can cure (a certificate that does not
// verify, wrong credentials).
func (r *Relay) waitForKafka(ctx context.Context) (bool, error) {
	pub := r.publish().Publisher(publisher.WithLogger(r.log), publisher.WithMetrics(r.m.Publisher()))
	defer pub.Close()
	for attempt := 1; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := pub.Ping(pctx)
		cancel()
		if err == nil {
			if attempt > 1 {
				r.log.Info("kafka reachable", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt))
			}
			return true, nil
		}
		if ctx.Err() != nil {
			return false, nil
		}
		if err := hint.With(err); poison.IsPermanent(err) {
			return false, err
		}
		d := backoff.Jitter(attempt, 500*time.Millisecond, 30*time.Second)
		r.log.Warn("kafka unreachable, retrying", slog.String("stage", "kafka_connect"), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !backoff.Sleep(ctx, d) {
			return false, nil
		}
	}
}
