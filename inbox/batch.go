package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// BatchHandler applies the effects of several events at once inside tx,
// the transaction that also registers each of them in processed_events:
// one set-based statement (INSERT … SELECT FROM unnest(…), UPDATE … FROM)
// instead of one per event. evs are the batch's fresh events in record
// order; duplicates and parked events are not in it. An aggregate may
// appear more than once, in version order.
//
// Returning an error rolls the whole batch back. The consumer then applies
// the batch again in halves, down to single events, so that exactly the
// failing event meets the retry and dead-letter policy and every other
// event is applied once. A check such as ExpectRows compares the rows a
// statement changed with what the batch expects (the number of events it
// covers) and fails the batch on a mismatch; the halving then finds the
// event at fault. The rules of Handler apply: no commit or rollback of tx,
// no unrepeatable effects outside PostgreSQL.
type BatchHandler func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error

// maxBatchSize bounds BatchSize: a batch is a few array parameters and one
// transaction's locks, which should stay well within PostgreSQL's limits
// (max_locks_per_transaction does not apply to advisory locks held in
// shared memory, but every lock takes a slot of the lock table).
const maxBatchSize = 10000

// outcome of one event in a transaction.
type outcome int

const (
	applied outcome = iota
	duplicate
	parked
)

// handlerError is a Handler's error at evs[index] of a batch: the batch is
// then split there instead of halved.
type handlerError struct {
	index int
	err   error
}

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// applyRecords takes a partition's batch of records to final outcomes, in
// order. It returns how many leading records have one (their offsets may
// be committed) and an error: a fatal one (*poison.HaltError, the inbox's own
// tables failing) or ctx's when the generation or Run ended first.
// Records that are not outbox events are dead-lettered where they stand,
// and so are events whose framed value cannot be decoded (schemaValue);
// a schema registry that does not answer holds the partition at that
// record (the events before it are applied) until it does.
func (c *Consumer) applyRecords(ctx, txCtx context.Context, msgs []kafka.Message) (int, error) {
	evs := make([]record.Event, len(msgs))
	batch := make([]*record.Event, 0, len(msgs))
	start := 0
	for i, m := range msgs {
		ev, err := record.DecodeFormat(m, c.cfg.RecordFormat)
		headersOK := err == nil
		if headersOK {
			var re *registryError
			if err = c.schemaValue(ctx, &ev); errors.As(err, &re) {
				// Apply what came before (its offsets may be committed),
				// then wait here for the registry.
				done, aerr := c.apply(ctx, txCtx, batch)
				if aerr != nil {
					return start + done, aerr
				}
				start, batch = i, batch[:0]
				if err = c.awaitSchema(ctx, &ev, err); err != nil && ctx.Err() != nil {
					return i, ctx.Err()
				}
			}
		}
		evs[i] = ev
		if err == nil {
			batch = append(batch, &evs[i])
			continue
		}
		done, aerr := c.apply(ctx, txCtx, batch)
		if aerr != nil {
			return start + done, aerr
		}
		if !headersOK {
			// Not an outbox event: its fields may be anything.
			evs[i].ID = recordID(m.Topic, m.Partition, m.Offset)
		}
		c.m.errors("decode")
		if err := c.fail(ctx, &evs[i], err, 0); err != nil {
			return i, err
		}
		start, batch = i+1, batch[:0]
	}
	done, err := c.apply(ctx, txCtx, batch)
	return start + done, err
}

// apply takes consecutive events of one partition to final outcomes in
// order, as one transaction if it can. PostgreSQL being unavailable
// retries the batch without limit; a handler error splits it: at the
// failing event for a Handler, in halves for a BatchHandler, until the
// failing event is alone and meets the retry and dead-letter policy.
func (c *Consumer) apply(ctx, txCtx context.Context, evs []*record.Event) (int, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	for infra := 0; ; {
		start := time.Now()
		outs, err := c.tryBatch(txCtx, evs)
		if err == nil {
			c.count(evs, outs, time.Since(start))
			return len(evs), nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if fatal := c.storeFailure(err); fatal != nil {
			return 0, fatal
		}
		if isTransientPG(err) || errors.Is(err, errConnLost) {
			infra++
			c.m.errors("database")
			c.retries.Add(1)
			wait := c.backoff(infra)
			c.log.Warn("database unavailable, retrying the batch", slog.String("stage", "apply"), slog.Int("events", len(evs)),
				slog.Int("attempt", infra), slog.Any("error", err), slog.Duration("backoff", wait))
			if err := sleep(ctx, wait); err != nil {
				return 0, err
			}
			continue
		}
		if len(evs) == 1 {
			return c.processOne(ctx, txCtx, evs[0], err)
		}
		var he *handlerError
		if errors.As(err, &he) {
			return c.applySplit(ctx, txCtx, evs, he.index, he.err)
		}
		// A BatchHandler does not say which event failed: halve until the
		// failing one is alone. The halving re-runs the handler, so it
		// counts as a retry and the failure as a handler error.
		c.m.errors("handler")
		c.retries.Add(1)
		c.log.Warn("batch handler failed; applying the batch in halves to find the failing event", slog.String("stage", "apply"),
			slog.Int("events", len(evs)), slog.Any("error", err))
		h := len(evs) / 2
		n, err := c.apply(ctx, txCtx, evs[:h])
		if err != nil {
			return n, err
		}
		m, err := c.apply(ctx, txCtx, evs[h:])
		return n + m, err
	}
}

// applySplit applies evs around evs[i], whose handler failed with cause:
// the events before it as a batch, then it alone (cause counts as its
// first attempt), then the rest.
func (c *Consumer) applySplit(ctx, txCtx context.Context, evs []*record.Event, i int, cause error) (int, error) {
	n, err := c.apply(ctx, txCtx, evs[:i])
	if err != nil {
		return n, err
	}
	m, err := c.processOne(ctx, txCtx, evs[i], cause)
	if err != nil {
		return n + m, err
	}
	k, err := c.apply(ctx, txCtx, evs[i+1:])
	return n + 1 + k, err
}

// processOne takes one event to a final outcome with the retry policy:
// handler errors are retried with backoff up to MaxAttempts (cause, if
// not nil, was the first attempt), then the event is dead-lettered or the
// consumer halts. It returns 1 once the outcome is final.
func (c *Consumer) processOne(ctx, txCtx context.Context, ev *record.Event, cause error) (int, error) {
	one := []*record.Event{ev}
	attempt, infra := 1, 0
	for err := cause; ; err = nil {
		if err == nil {
			start := time.Now()
			var outs []outcome
			if outs, err = c.tryBatch(txCtx, one); err == nil {
				c.count(one, outs, time.Since(start))
				return 1, nil
			}
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if fatal := c.storeFailure(err); fatal != nil {
			return 0, fatal
		}
		var wait time.Duration
		log := c.eventLog(ev).With(slog.String("stage", "apply"), slog.Int("attempt", attempt))
		switch {
		case isTransientPG(err) || errors.Is(err, errConnLost):
			c.m.errors("database")
			infra++
			wait = c.backoff(infra)
			log.Warn("database unavailable, retrying", slog.Any("error", err), slog.Duration("backoff", wait))
		case poison.IsPermanent(err) || attempt >= c.cfg.MaxAttempts:
			reason := "handler"
			if poison.IsPermanent(err) {
				reason = "permanent"
			}
			c.m.errors(reason)
			if err := c.fail(ctx, ev, unwrapHandler(err), attempt); err != nil {
				return 0, err
			}
			return 1, nil
		default:
			c.m.errors("handler")
			wait = c.backoff(attempt)
			log.Warn("handler failed, retrying", slog.Any("error", err), slog.Duration("backoff", wait))
			attempt++
		}
		c.retries.Add(1)
		if err := sleep(ctx, wait); err != nil {
			return 0, err
		}
	}
}

// unwrapHandler drops the batch position from a handler's error.
func unwrapHandler(err error) error {
	var he *handlerError
	if errors.As(err, &he) {
		return he.err
	}
	return err
}

// storeFailure returns the error to stop Run with when err is a failure
// of the inbox's own SQL that retrying cannot fix (tables missing, no
// privilege): no event is at fault, so none is dead-lettered.
func (c *Consumer) storeFailure(err error) error {
	var se *storeError
	if errors.As(err, &se) && !isTransientPG(err) {
		return fmt.Errorf("inbox: %w (run inbox.Migrate for schema %q and check the role's privileges)", err, c.cfg.Schema)
	}
	return nil
}

// tryBatch runs one transaction for evs: lock their aggregates, skip known
// events, park those of waiting aggregates, register the rest and run the
// handler for the fresh ones. It returns each event's outcome.
func (c *Consumer) tryBatch(ctx context.Context, evs []*record.Event) ([]outcome, error) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.sem }()
	tx, err := c.cfg.Pool.Begin(ctx)
	if err != nil {
		return nil, &storeError{"begin", err}
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck

	known, waiting, err := c.store.checkBatch(ctx, tx, evs)
	if err != nil {
		return nil, &storeError{"check", err}
	}
	outs := make([]outcome, len(evs))
	candidates := make([]*record.Event, 0, len(evs))
	seen := make(map[string]struct{}, len(evs))
	var park []*record.Event
	for i, ev := range evs {
		_, again := seen[ev.ID]
		seen[ev.ID] = struct{}{}
		switch {
		case again || known[ev.ID]:
			outs[i] = duplicate
		case waiting[aggregateKey{ev.AggregateType, ev.AggregateID}]:
			outs[i] = parked
			park = append(park, ev)
		default:
			candidates = append(candidates, ev)
		}
	}
	fresh, err := c.store.registerBatch(ctx, tx, candidates, park)
	if err != nil {
		return nil, &storeError{"register", err}
	}
	run := make([]*record.Event, 0, len(fresh))
	for i, ev := range evs {
		if outs[i] != applied {
			continue
		}
		if _, ok := fresh[ev.ID]; !ok {
			outs[i] = duplicate
			continue
		}
		run = append(run, ev)
		if c.cfg.Handler == nil {
			continue
		}
		if err := c.handle(ctx, tx, ev); err != nil {
			return nil, &handlerError{index: i, err: connLost(tx, err)}
		}
	}
	if c.cfg.BatchHandler != nil && len(run) > 0 {
		if err := c.handleBatch(ctx, tx, run); err != nil {
			return nil, connLost(tx, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("inbox: commit a batch of %d events: %w", len(evs), err)
	}
	return outs, nil
}

// connLost tells a handler error caused by the connection dying under it
// (not the event's fault) from the handler's own.
func connLost(tx pgx.Tx, err error) error {
	if tx.Conn().IsClosed() && !poison.IsPermanent(err) {
		return fmt.Errorf("inbox: handler lost its connection: %w (%w)", err, errConnLost)
	}
	return err
}

// count records the outcomes of a committed batch.
func (c *Consumer) count(evs []*record.Event, outs []outcome, d time.Duration) {
	c.batches.Add(1)
	c.m.batch(len(evs), d)
	for i, ev := range evs {
		c.m.processed(d, ev.Time)
		switch outs[i] {
		case applied:
			c.applied.Add(1)
			c.m.applied()
		case duplicate:
			c.duplicates.Add(1)
			c.m.duplicate()
			if c.log.Enabled(context.Background(), slog.LevelDebug) {
				c.eventLog(ev).Debug("duplicate absorbed", slog.String("stage", "dedupe"))
			}
		case parked:
			c.parked.Add(1)
			c.m.parked()
			c.eventLog(ev).Warn("aggregate is waiting on a dead-lettered event: event parked", slog.String("stage", "park"))
		}
	}
}

// eventLog is the logger with an event's identifying fields (never the
// payload).
func (c *Consumer) eventLog(ev *record.Event) *slog.Logger {
	return c.log.With(slog.String("event_id", ev.ID), slog.String("aggregate_id", ev.AggregateID), slog.String("event_type", ev.EventType))
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
