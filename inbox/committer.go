package inbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"
)

// committer batches offset commits. It only ever holds messages whose
// outcome is final in PostgreSQL, and since events are processed one at a
// time in fetch order, the highest held offset of a partition is never
// past one whose outcome is unknown.
type committer struct {
	r       *kafka.Reader
	c       *Consumer
	pending map[topicPartition]kafka.Message
	n       int // events marked since the last commit
}

type topicPartition struct {
	topic     string
	partition int
}

func newCommitter(r *kafka.Reader, c *Consumer) *committer {
	return &committer{r: r, c: c, pending: map[topicPartition]kafka.Message{}}
}

// mark records that m's outcome is committed in PostgreSQL.
func (k *committer) mark(m kafka.Message) {
	k.pending[topicPartition{m.Topic, m.Partition}] = m
	k.n++
}

// flush commits the marked offsets. A failed commit (a rebalance, the
// broker away) is logged and dropped: the next commit of the partition
// supersedes it, and at worst the events are delivered again and absorbed.
func (k *committer) flush(ctx context.Context) {
	if len(k.pending) == 0 {
		return
	}
	msgs := make([]kafka.Message, 0, len(k.pending))
	for _, m := range k.pending {
		msgs = append(msgs, m)
	}
	clear(k.pending)
	k.n = 0
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if err := k.r.CommitMessages(cctx, msgs...); err != nil {
		k.c.m.errors("offset_commit")
		k.c.log.Warn("offset commit failed; the events will be delivered again and absorbed", slog.String("stage", "offset_commit"), slog.Any("error", err), slog.Int("partitions", len(msgs)))
		return
	}
	k.c.commits.Add(1)
	k.c.m.commit(time.Since(start))
}
