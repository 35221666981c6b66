package publisher

// This file holds how the publisher waits between attempts: backoff with
// jitter, the fast retries while a leader or coordinator moves, and the
// log level of a retry.

import (
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// backoff returns a full-jitter delay for attempt (1-based).
func (p *Publisher) backoff(attempt int) time.Duration {
	return backoff.Jitter(attempt, p.cfg.BackoffBase, p.cfg.BackoffMax)
}

// beforeRetry returns the wait before retrying a batch that failed with
// err for the attempt-th time, failing since since, and starts a metadata
// refresh when the failure is a leader's move. While a partition leader
// moves (its broker died, shut down or lost its followers) the new leader
// takes over the moment the controller fences the old one, and
// refreshMetadata shows it to the transport within healRetry: waiting
// longer than that only adds to the outage, so for such failures the
// delay is capped at healRetry, during healWindow. A cluster still
// unreachable after that gets the usual exponential backoff, so a long
// outage costs the brokers no more than a few requests per partition per
// BackoffMax.
func (p *Publisher) beforeRetry(attempt int, err error, since time.Time) time.Duration {
	if errors.Is(err, kafka.ConcurrentTransactions) || verificationCancelled(err) {
		// The previous transaction's markers are still being written
		// (exactly-once): done within milliseconds, as the Java producer
		// assumes when it retries AddPartitionsToTxn after 20 ms. With
		// group commit every transaction's first request meets it, so the
		// first retries come sooner: 2 ms doubling to 20 ms, jittered.
		d := min(concurrentTxnRetry<<min(attempt-1, 4), concurrentTxnRetryMax)
		return d/2 + backoff.Jitter(1, d/2, d/2)
	}
	if (healing(err) || kafkaproduce.CoordinatorMoving(err)) && time.Since(since) < healWindow {
		p.refreshMetadata()
		return backoff.Jitter(attempt, p.cfg.BackoffBase, max(min(p.cfg.BackoffMax, healRetry), p.cfg.BackoffBase))
	}
	return p.backoff(attempt)
}

// verificationCancelled reports a transactional batch refused because
// its partition leader's check with the coordinator that the partition
// is in the transaction (KIP-890) was cancelled by a later request of
// the same transactional id: Kafka answers NOT_ENOUGH_REPLICAS with
// "Unable to verify ... NETWORK_EXCEPTION". Nothing is wrong with the
// replicas, and a retry passes at once: it gets CONCURRENT_TRANSACTIONS'
// short retries, not a replica outage's backoff.
func verificationCancelled(err error) bool {
	return errors.Is(err, kafka.NotEnoughReplicas) && strings.Contains(err.Error(), "Unable to verify")
}

const (
	// concurrentTxnRetry and concurrentTxnRetryMax bound the wait before
	// a request the transaction coordinator answered
	// CONCURRENT_TRANSACTIONS is sent again (see beforeRetry).
	concurrentTxnRetry    = 2 * time.Millisecond
	concurrentTxnRetryMax = 20 * time.Millisecond
	// healWindow is how long after a batch's first failure a leader
	// change gets fast retries (beforeRetry): longer than a broker's
	// session timeout (9 s by default, 18 s on older clusters) plus an
	// election.
	healWindow = 30 * time.Second
	// healRetry caps the retry delay during healWindow and spaces the
	// metadata refreshes of refreshMetadata.
	healRetry = 250 * time.Millisecond
)

// refreshMetadata makes the transport fetch the cluster's metadata anew,
// at most once per healRetry over all lanes. kafka-go's Transport routes
// every request by metadata it refreshes only every Kafka.MetadataTTL
// (at a random moment within it) and never on NOT_LEADER_OR_FOLLOWER or a
// dead broker, so a lane retrying at once would keep reaching the old
// leader for up to a TTL after the election. Closing the transport's
// pools (CloseIdleConnections: requests in flight finish on their
// connections) makes the next request start a pool whose first step is
// a metadata request, to whichever bootstrap broker answers. The Java
// producer refreshes its metadata on these errors the same way.
func (p *Publisher) refreshMetadata() {
	if p.closeIdle == nil {
		return
	}
	now := time.Now().UnixNano()
	last := p.refreshed.Load()
	if now-last < int64(healRetry) || !p.refreshed.CompareAndSwap(last, now) {
		return
	}
	p.closeIdle()
}

// sleep waits d unless the publisher closes first.
func (p *Publisher) sleep(d time.Duration) bool { return backoff.Sleep(p.ctx, d) }

// retryLog returns the log event for a retry: a warning when a failure
// starts and every tenth attempt after, debug in between, so a long outage
// is visible without a line per partition per backoff.
func retryLevel(attempt int) slog.Level {
	if attempt == 1 || attempt%10 == 0 {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}
