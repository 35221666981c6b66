package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// Run consumes until ctx is done (it then returns nil after the batches in
// flight finished and the processed offsets were committed) or a fatal
// error (a *poison.HaltError under poison.Halt).
//
// Run joins the consumer group and, per generation, starts one worker per
// assigned partition with its own reader: partitions are applied
// concurrently (up to Concurrency transactions at a time), each one in
// order. Offsets are committed only for events whose transaction committed
// (or that were dead-lettered), so a crash at any point causes redelivery,
// never a skipped event. A rebalance ends the generation: every worker
// finishes its batch in flight, the final offsets are committed, and only
// then does the consumer rejoin and release its partitions.
//
// When Run returns, every goroutine it started has ended - the workers,
// the committers, the pruning loop - so nothing of the consumer uses the
// pool or Kafka any more: the caller may close the pool, or start a new
// Run, without a batch, an offset commit or a prune of this one still in
// flight.
func (c *Consumer) Run(ctx context.Context) error {
	rc := c.readerConfig()
	group, err := kafka.NewConsumerGroup(groupConfig(c.cfg, rc))
	if err != nil {
		return fmt.Errorf("inbox: consumer group: %w", err)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var prune *startstop.Service
	if c.cfg.Retention > 0 {
		prune = startstop.New(c.pruneLoop)
		prune.Start(runCtx)
	}
	// gens counts the functions startGeneration hands to kafka-go, which
	// does not wait for one it starts on a generation that already ended
	// (a worker failing at once ends it): Run waits for them itself.
	var gens sync.WaitGroup
	c.log.Info("inbox consumer started", slog.String("stage", "start"), slog.String("group", c.cfg.GroupID),
		slog.Any("topics", c.cfg.Topics), slog.Int("batch_size", c.cfg.BatchSize), slog.Int("concurrency", c.cfg.Concurrency))
	for {
		gen, err := group.Next(runCtx)
		if err != nil {
			if runCtx.Err() != nil {
				break
			}
			// Joining failed (coordinator away, a rebalance raced us): the
			// group retries on its own after JoinGroupBackoff.
			c.log.Warn("joining the consumer group failed; retrying", slog.String("stage", "kafka"), slog.Any("error", err))
			continue
		}
		c.startGeneration(runCtx, cancel, gen, rc, &gens)
	}
	// Close waits for the generation's workers (in-flight batches and the
	// final offset commit), then leaves the group.
	if err := group.Close(); err != nil {
		c.log.Warn("closing the consumer group", slog.String("stage", "shutdown"), slog.Any("error", err))
	}
	gens.Wait()
	startstop.StopAll(prune)
	c.log.Info("inbox consumer stopped", slog.String("stage", "shutdown"))
	if cause := context.Cause(runCtx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	return nil
}

// readerConfig is the kafka-go configuration after TuneReader; it is split
// into the group's settings (groupConfig) and each partition reader's
// (partitionReader).
func (c *Consumer) readerConfig() kafka.ReaderConfig {
	rc := kafka.ReaderConfig{
		Brokers:     c.cfg.Brokers,
		GroupID:     c.cfg.GroupID,
		GroupTopics: c.cfg.Topics,
		StartOffset: c.cfg.StartOffset,
		MinBytes:    1,
		// A partition's reader holds the response being applied and one
		// fetched ahead, so MaxBytes bounds the memory of each assigned
		// partition whatever the backlog (8 MiB made a backlog cost up
		// to 16 MiB per partition); 256 KiB still holds more records of
		// a few hundred bytes than a batch, and the next response is
		// already fetched when the batch is applied.
		MaxBytes:              256 << 10,
		MaxWait:               500 * time.Millisecond,
		IsolationLevel:        kafka.ReadCommitted,
		HeartbeatInterval:     time.Second,
		WatchPartitionChanges: true,
		ReadBackoffMin:        100 * time.Millisecond,
		ReadBackoffMax:        time.Second,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) {
			c.log.Warn(fmt.Sprintf(f, a...), slog.String("stage", "kafka"))
		}),
	}
	if c.cfg.TuneReader != nil {
		c.cfg.TuneReader(&rc)
	}
	rc.GroupID, rc.GroupTopics, rc.Topic, rc.Partition, rc.CommitInterval = c.cfg.GroupID, c.cfg.Topics, "", 0, 0
	return rc
}

// groupConfig takes the consumer group's settings from rc.
func groupConfig(cfg Config, rc kafka.ReaderConfig) kafka.ConsumerGroupConfig {
	return kafka.ConsumerGroupConfig{
		ID:                     cfg.GroupID,
		Brokers:                rc.Brokers,
		Dialer:                 rc.Dialer,
		Topics:                 cfg.Topics,
		GroupBalancers:         rc.GroupBalancers,
		HeartbeatInterval:      rc.HeartbeatInterval,
		PartitionWatchInterval: rc.PartitionWatchInterval,
		WatchPartitionChanges:  rc.WatchPartitionChanges,
		SessionTimeout:         rc.SessionTimeout,
		RebalanceTimeout:       rc.RebalanceTimeout,
		JoinGroupBackoff:       rc.JoinGroupBackoff,
		RetentionTime:          rc.RetentionTime,
		StartOffset:            rc.StartOffset,
		Logger:                 rc.Logger,
		ErrorLogger:            rc.ErrorLogger,
	}
}

// partitionReader reads one assigned partition from offset (kafka-go's
// FirstOffset and LastOffset included) with rc's fetch settings and
// Dialer. It is a kafkafetch.PartitionReader, not a kafka.Reader: kafka-go
// delivers the records of aborted transactions and the transaction
// markers as ordinary messages, and the inbox must apply neither.
func partitionReader(rc kafka.ReaderConfig, log *slog.Logger, topic string, partition int, offset int64) (*kafkafetch.PartitionReader, error) {
	r, err := kafkafetch.New(kafkafetch.Config{
		Brokers:         rc.Brokers,
		Dialer:          rc.Dialer,
		Topic:           topic,
		Partition:       partition,
		Offset:          offset,
		MinBytes:        rc.MinBytes,
		MaxBytes:        rc.MaxBytes,
		MaxWait:         rc.MaxWait,
		RequestTimeout:  rc.ReadBatchTimeout,
		ReadUncommitted: rc.IsolationLevel == kafka.ReadUncommitted,
		BackoffMin:      rc.ReadBackoffMin,
		BackoffMax:      rc.ReadBackoffMax,
		Logger:          log,
	})
	if err != nil {
		return nil, fmt.Errorf("inbox: %s/%d: reader at offset %d: %w", topic, partition, offset, err)
	}
	return r, nil
}

// startGeneration starts a worker per assigned partition and the
// generation's committer, all bound to gen: kafka-go waits for them before
// it rejoins the group, which is what makes a revocation clean. gens
// counts them too, for Run.
func (c *Consumer) startGeneration(ctx context.Context, fatal context.CancelCauseFunc, gen *kafka.Generation, rc kafka.ReaderConfig, gens *sync.WaitGroup) {
	com := newCommitter(c, gen)
	var workers sync.WaitGroup
	assigned := 0
	for topic, parts := range gen.Assignments {
		for _, pa := range parts {
			assigned++
			workers.Add(1)
			gens.Add(1)
			gen.Start(func(genCtx context.Context) {
				defer gens.Done()
				defer c.loopExit("worker")
				defer workers.Done()
				wctx, stop := context.WithCancel(ctx)
				defer stop()
				defer context.AfterFunc(genCtx, stop)()
				w := &partitionWorker{c: c, com: com, topic: topic, partition: pa.ID}
				if err := w.run(wctx, rc, pa.Offset); err != nil {
					fatal(err)
				}
			})
		}
	}
	c.log.Info("consumer group generation started", slog.String("stage", "rebalance"), slog.Int("generation", int(gen.ID)),
		slog.Int("partitions", assigned))
	gens.Add(1)
	gen.Start(func(genCtx context.Context) {
		defer gens.Done()
		defer c.loopExit("committer")
		cctx, stop := context.WithCancel(ctx)
		defer stop()
		defer context.AfterFunc(genCtx, stop)()
		com.run(cctx, &workers)
	})
}

// partitionWorker applies one assigned partition's records in order, a
// batch at a time, for one generation.
type partitionWorker struct {
	c         *Consumer
	com       *committer
	topic     string
	partition int
}

// run reads and applies until ctx ends (a rebalance, Run stopping), and
// returns only fatal errors. The batch in flight when ctx ends still
// finishes (bounded by ShutdownTimeout): its transaction runs on a context
// that is cancelled only ShutdownTimeout after ctx.
func (w *partitionWorker) run(ctx context.Context, rc kafka.ReaderConfig, offset int64) error {
	c := w.c
	r, err := partitionReader(rc, c.log, w.topic, w.partition, offset)
	if err != nil {
		return err
	}
	defer func() { // r is replaced after an offset out of range
		if r != nil {
			r.Close()
		}
	}()
	txCtx, cancelTx := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelTx()
	// The grace period is a service, not a timer left behind: it ends
	// when run returns, so no goroutine of the worker outlives Run.
	grace := startstop.New(func(gctx context.Context) {
		defer c.loopExit("grace")
		select {
		case <-ctx.Done():
		case <-gctx.Done():
			return
		}
		t := time.NewTimer(c.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-t.C:
			cancelTx()
		case <-gctx.Done():
		}
	})
	grace.Start(context.Background())
	defer grace.Stop()

	buf := make([]kafka.Message, 0, c.cfg.BatchSize)
	for {
		var err error
		buf, err = w.fetch(ctx, r, buf[:0])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var oor *kafkafetch.OffsetOutOfRangeError
			if !errors.As(err, &oor) {
				return fmt.Errorf("inbox: fetch %s/%d: %w", w.topic, w.partition, err)
			}
			r.Close()
			if r, err = w.outOfRange(ctx, rc, oor); err != nil {
				return err
			}
			if r == nil {
				return nil // ctx ended
			}
			continue
		}
		if ctx.Err() != nil {
			return nil // the generation ended while the batch filled: leave it to the next owner
		}
		last := buf[len(buf)-1]
		if last.HighWaterMark > 0 {
			c.m.lag(w.topic, w.partition, last.HighWaterMark-last.Offset-1)
		}
		done, err := c.applyRecords(ctx, txCtx, buf)
		if done > 0 {
			w.com.mark(w.topic, w.partition, buf[done-1].Offset+1, done)
		}
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil
			}
			return err
		}
	}
}

// fetch returns the next batch: the first record (waiting as long as it
// takes), then what arrives within BatchLinger, up to BatchSize records.
func (w *partitionWorker) fetch(ctx context.Context, r *kafkafetch.PartitionReader, buf []kafka.Message) ([]kafka.Message, error) {
	m, err := r.FetchMessage(ctx)
	if err != nil {
		return buf, err
	}
	buf = append(buf, m)
	size := w.c.cfg.BatchSize
	if size == 1 {
		return buf, nil
	}
	lctx, cancel := context.WithTimeout(ctx, w.c.cfg.BatchLinger)
	defer cancel()
	for len(buf) < size {
		m, err := r.FetchMessage(lctx)
		if err != nil {
			break // the linger is over (or ctx ended: the caller sees it next time)
		}
		buf = append(buf, m)
	}
	return buf, nil
}

// outOfRange returns a new reader after the partition's log no longer
// holds the offset to read, as kafka.Reader (the inbox's reader before)
// did: below the log's start (retention deleted records before they were
// applied) reading resumes at the start, with a warning that names the
// lost range; past its end (a truncated or recreated log) the same offset
// is tried again after ReadBackoffMax (at least a second), until the log
// reaches it. It
// returns a nil reader when ctx ended meanwhile.
func (w *partitionWorker) outOfRange(ctx context.Context, rc kafka.ReaderConfig, oor *kafkafetch.OffsetOutOfRangeError) (*kafkafetch.PartitionReader, error) {
	c := w.c
	next := oor.Offset
	if oor.Offset < oor.First {
		next = oor.First
		c.log.Warn("offset below the partition's log start: records were deleted before they were applied; skipping them",
			slog.String("stage", "kafka"), slog.String("topic", w.topic), slog.Int("partition", w.partition),
			slog.Int64("offset", oor.Offset), slog.Int64("log_start", oor.First), slog.Int64("skipped", oor.First-oor.Offset))
	} else {
		c.log.Warn("offset past the partition's log end; waiting for the log to reach it",
			slog.String("stage", "kafka"), slog.String("topic", w.topic), slog.Int("partition", w.partition),
			slog.Int64("offset", oor.Offset), slog.Int64("log_end", oor.Last))
		if !backoff.Sleep(ctx, max(rc.ReadBackoffMax, time.Second)) {
			return nil, nil
		}
	}
	return partitionReader(rc, c.log, w.topic, w.partition, next)
}

// loopExit calls the consumer's loop-exit hook, when a test set one: a
// test makes one goroutine of Run (the pruning loop, a worker, its grace
// period, a committer) linger there, so that if Run did not wait for it,
// it would still be running when Run returns. Each of them defers it.
func (c *Consumer) loopExit(loop string) {
	if c.loopExitHook != nil {
		c.loopExitHook(loop)
	}
}
