package doctor

import (
	"context"
	"fmt"
	"strconv"
	"time"
)

// Retention is the set of windows docs/operations.md ("Retention") relates:
//
//	consumer dedupe retention >= Kafka retention >= replay range = min(outbox retention, checkpoint retention)
//
// A zero duration is unknown (the check that needs it is skipped), except
// CheckpointRetention, where 0 means the history is kept forever.
type Retention struct {
	// Outbox is how long rows stay (run --cleanup-older-than); 0: no
	// cleanup configured, rows stay forever.
	Outbox time.Duration
	// Checkpoint is --checkpoint-retention (0: kept forever).
	Checkpoint time.Duration
	// Kafka is the shortest retention.ms of the topics; KafkaInfinite is
	// set when every topic keeps records forever (retention.ms -1).
	Kafka         time.Duration
	KafkaInfinite bool
	// Dedupe is how long consumers remember event ids.
	Dedupe time.Duration
}

// forever stands for an unbounded window in comparisons.
const forever = time.Duration(1<<63 - 1)

func orForever(d time.Duration) time.Duration {
	if d <= 0 {
		return forever
	}
	return d
}

func human(d time.Duration) string {
	if d == forever {
		return "forever"
	}
	if d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// ReplayWindow is how far back outbox-relay replay reaches: rows must
// still be in the table and their positions in the checkpoint history.
func (t Retention) ReplayWindow() time.Duration {
	return min(orForever(t.Outbox), orForever(t.Checkpoint))
}

// CheckRetention adds a finding per relation of the windows.
func CheckRetention(t Retention, r *Report) {
	outbox, cp := orForever(t.Outbox), orForever(t.Checkpoint)
	replay := t.ReplayWindow()
	if t.Outbox <= 0 {
		r.add("retention outbox", Pass, "no cleanup configured (give --cleanup-older-than to check it): rows stay forever, recover and replay can use them all", "")
	} else {
		r.add("retention outbox", Pass, fmt.Sprintf("rows stay %s; cleanup deletes only rows a checkpoint confirmed, so recover never lacks a row", human(outbox)), "")
	}

	switch {
	case cp < outbox:
		r.add("retention checkpoints", Warn,
			fmt.Sprintf("--checkpoint-retention %s < outbox retention %s: replay --from-lsn/--since reaches back %s only; older rows need replay --all", human(cp), human(outbox), human(cp)),
			fmt.Sprintf("set --checkpoint-retention to at least %s (cleanup prunes checkpoints older than its cutoff itself)", human(outbox)))
	default:
		r.add("retention checkpoints", Pass, fmt.Sprintf("--checkpoint-retention %s >= outbox retention %s: replay range %s", human(cp), human(outbox), human(replay)), "")
	}

	kafka := t.Kafka
	if t.KafkaInfinite {
		kafka = forever
	}
	switch {
	case kafka <= 0:
		// unknown: no topic readable
	case kafka < replay:
		fix := fmt.Sprintf("raise the topics' retention.ms to at least %d", replay.Milliseconds())
		if replay == forever {
			fix = "configure cleanup (--cleanup-older-than) and --checkpoint-retention to the window you rely on, or raise retention.ms to -1"
		}
		r.add("retention kafka", Warn,
			fmt.Sprintf("Kafka keeps records %s, less than the replay range %s: a consumer rebuilt from Kafka misses what only a replay can restore", human(kafka), human(replay)), fix)
	default:
		r.add("retention kafka", Pass, fmt.Sprintf("Kafka keeps records %s >= replay range %s", human(kafka), human(replay)), "")
	}

	if t.Dedupe <= 0 {
		r.add("retention dedupe", Warn, "consumer dedupe retention unknown: duplicates older than it are applied twice",
			"give --consumer-dedupe-retention (how long consumers remember event ids) to check it")
		return
	}
	switch {
	case t.Dedupe < replay:
		fix := fmt.Sprintf("keep consumer dedupe state at least %s, or shorten the replay range (--cleanup-older-than, --checkpoint-retention) to %s", human(replay), human(t.Dedupe))
		r.add("retention dedupe", Fail,
			fmt.Sprintf("consumer dedupe retention %s < replay range %s: a replay of older events is applied twice by consumers", human(t.Dedupe), human(replay)), fix)
	case kafka > 0 && t.Dedupe < kafka:
		r.add("retention dedupe", Warn,
			fmt.Sprintf("consumer dedupe retention %s < Kafka retention %s: a consumer re-reading from the beginning sees duplicates it no longer recognises", human(t.Dedupe), human(kafka)),
			"keep consumer dedupe state at least as long as retention.ms, or lower retention.ms")
	default:
		r.add("retention dedupe", Pass, fmt.Sprintf("consumer dedupe retention %s covers the replay range %s", human(t.Dedupe), human(replay)), "")
	}
}

// KafkaRetention reads retention.ms of the topics and returns the shortest
// finite one (infinite when every topic keeps records forever); ok is
// false when no topic's config was readable.
func KafkaRetention(ctx context.Context, t KafkaTarget) (shortest time.Duration, infinite, ok bool) {
	c, closeIdle := t.Client()
	defer closeIdle()
	infinite = true
	for _, topic := range t.Topics {
		cfg, err := topicConfig(ctx, c, topic)
		if err != nil {
			continue
		}
		ms, err := strconv.ParseInt(cfg["retention.ms"], 10, 64)
		if err != nil {
			continue
		}
		ok = true
		if ms < 0 {
			continue
		}
		d := time.Duration(ms) * time.Millisecond
		if infinite || d < shortest {
			shortest, infinite = d, false
		}
	}
	return shortest, infinite && ok, ok
}
