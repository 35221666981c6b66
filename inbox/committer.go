package inbox

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// committer batches one generation's offset commits. Workers mark a
// partition's next offset only after every record before it has a final
// outcome in PostgreSQL (each partition is applied in order), so a
// committed offset is never past a record whose outcome is unknown.
type committer struct {
	c   *Consumer
	gen *kafka.Generation

	mu      sync.Mutex
	pending map[string]map[int]int64 // topic → partition → next offset to read
	n       int                      // events marked since the last commit
	kick    chan struct{}            // CommitBatch reached
}

func newCommitter(c *Consumer, gen *kafka.Generation) *committer {
	return &committer{c: c, gen: gen, pending: map[string]map[int]int64{}, kick: make(chan struct{}, 1)}
}

// mark records that every record of topic/partition before next has its
// outcome committed in PostgreSQL; events is how many that adds.
func (k *committer) mark(topic string, partition int, next int64, events int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pending[topic] == nil {
		k.pending[topic] = map[int]int64{}
	}
	k.pending[topic][partition] = next
	k.n += events
	if k.n >= k.c.cfg.CommitBatch {
		select {
		case k.kick <- struct{}{}:
		default:
		}
	}
}

// run commits every CommitInterval or CommitBatch events until ctx ends,
// then waits for the workers (their batches in flight) and commits what
// they marked last: the generation's final commit, made before kafka-go
// rejoins the group and the partitions move.
func (k *committer) run(ctx context.Context, workers *sync.WaitGroup) {
	tick := time.NewTicker(k.c.cfg.CommitInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			workers.Wait()
			k.flush()
			return
		case <-tick.C:
			k.flush()
		case <-k.kick:
			k.flush()
		}
	}
}

// flush commits the marked offsets. A failed commit (the generation ended,
// the coordinator away) is logged and its offsets are kept for the next
// try unless newer ones were marked meanwhile; at worst the events are
// delivered again and absorbed.
func (k *committer) flush() {
	k.mu.Lock()
	if len(k.pending) == 0 {
		k.mu.Unlock()
		return
	}
	offsets := k.pending
	k.pending, k.n = map[string]map[int]int64{}, 0
	k.mu.Unlock()

	start := time.Now()
	if err := k.gen.CommitOffsets(offsets); err != nil {
		k.c.m.errors("offset_commit")
		k.c.log.Warn("offset commit failed; the events will be delivered again and absorbed unless a later commit succeeds",
			slog.String("stage", "offset_commit"), slog.Any("error", err), slog.Int("generation", int(k.gen.ID)))
		k.mu.Lock()
		for topic, parts := range offsets {
			if k.pending[topic] == nil {
				k.pending[topic] = maps.Clone(parts)
				continue
			}
			for p, o := range parts {
				if _, newer := k.pending[topic][p]; !newer {
					k.pending[topic][p] = o
				}
			}
		}
		k.mu.Unlock()
		return
	}
	k.c.commits.Add(1)
	k.c.m.commit(time.Since(start))
}
