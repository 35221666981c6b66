package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/replication"
)

// A retry or discard publishes an aggregate's open rows at once, through a
// plain writer. The events of the aggregate committed before its earliest
// open row are not in the table: the relay published them as usual. If
// the relay's position is not yet past that row's transaction, some of
// them may not be in Kafka for good: in a Kafka transaction that aborted
// (exactly-once), or acknowledged by nobody before a crash (at-least-once).
// The stream then publishes them again when it restarts behind them, after
// the retried rows: consumers read a2, a3, a1 (issue 46). So a retry or
// discard first waits, bounded, until the earliest open row's transaction
// is behind the relay's delivered position, and refuses when it is not.
//
// Only the earliest open row matters: every later event of a quarantined
// aggregate is parked, so the events outside the table that come before
// any row published are those before the earliest one; events after the
// published rows reach Kafka after them whether they come from the stream
// or from its replay (the redelivered rows themselves are skipped: Hold).

// DefaultWait is how long a retry or discard waits for the relay, as
// Guard.Wait, unless told otherwise: a running relay confirms a committed
// range within a checkpoint interval (1 s), and an aborted range once its
// stream has restarted and replayed it, seconds as a rule.
const DefaultWait = 30 * time.Second

// defaultPoll is how often a waiting retry reads the relay's position.
const defaultPoll = 250 * time.Millisecond

// Delivered is a position of the relay's stream every event before which
// is in Kafka for good, and which the relay never resumes before: the
// LSN a checkpoint or the slot records (a TransactionEndLSN). Both are
// saved from the relay's acknowledgements, which come, in exactly-once
// mode, only after the range's Kafka transaction committed.
type Delivered struct {
	LSN pglogrepl.LSN
	// From names where it was read, for the operator: "checkpoint",
	// `slot "outbox_relay"`; empty when nothing records a position.
	From string
}

func (d Delivered) String() string {
	if d.From == "" {
		return "none recorded (no checkpoint of this server, no slot)"
	}
	return d.LSN.String() + " (" + d.From + ")"
}

// Passes reports whether the events of the transaction whose commit LSN is
// lsn are behind d. d is the end of a transaction, after its commit record,
// so a transaction that commits at d or later is not.
func (d Delivered) Passes(lsn pglogrepl.LSN) bool { return lsn < d.LSN }

// Progress reads the relay's delivered position (RelayPosition).
type Progress interface {
	// Delivered returns the relay's delivered position. need is the
	// commit LSN the caller waits for: a Progress with several sources
	// may stop reading at the first that passes it.
	Delivered(ctx context.Context, need pglogrepl.LSN) (Delivered, error)
}

// Guard is what a retry or discard checks before it publishes anything:
// that the aggregate's earliest open row is behind the relay's delivered
// position (see above).
type Guard struct {
	// Progress reads the position; required.
	Progress Progress
	// Wait bounds how long to wait for the position to pass the row
	// (without the aggregate's lock, which the relay may need to get
	// there). 0 refuses at once.
	Wait time.Duration
	// Poll is how often the position is read while waiting (0: 250ms).
	Poll time.Duration
	// OnWait, if set, is called once when the wait starts, with what it
	// waits for.
	OnWait func(*AheadError)
	// Log, if set, records the start of a wait (stage dlq), so that an
	// operator sees what a retry or discard is waiting for.
	Log *slog.Logger
}

// ErrAhead is what an AheadError matches with errors.Is.
var ErrAhead = errors.New("not yet behind the relay's delivered position")

// AheadError refuses a retry or discard: the aggregate's earliest open
// row is not behind the relay's delivered position, so publishing it now
// could put it ahead of events of the same aggregate that the relay has
// yet to deliver (again). Nothing was published or changed.
type AheadError struct {
	Aggregate Aggregate
	// EventID and Pos are the earliest open row's.
	EventID   string
	Pos       replication.Position
	Delivered Delivered
	// Waited is how long the command waited for it.
	Waited time.Duration
}

func (e *AheadError) Error() string {
	waited := "without waiting"
	if e.Waited > 0 {
		waited = "after waiting " + e.Waited.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("aggregate %s: nothing published: its earliest open event %s (transaction %s) is not yet behind the relay's delivered position %s, %s; "+
		"events of the aggregate committed before it may not be in Kafka for good yet (an aborted Kafka transaction the relay has to replay, "+
		"acknowledgements not confirmed yet), and published now it would come before them. Run the command again once the relay has caught up: "+
		"it must be running (start it if it is stopped); outbox-relay checkpoint show prints its position, which must pass %s",
		e.Aggregate, e.EventID, e.Pos.TxLSN, e.Delivered, waited, e.Pos.TxLSN)
}

// Is makes errors.Is(err, ErrAhead) true.
func (e *AheadError) Is(target error) bool { return target == ErrAhead }

// earliest is the earliest open row of an aggregate, in commit order.
type earliest struct {
	eventID string
	pos     replication.Position
	// foreign: written by another system (a restored dump): it comes
	// before every event this system decodes, so nothing the relay has
	// yet to deliver can precede it.
	foreign bool
	// others: the aggregate has open rows besides the one excepted (a
	// discard's), that is something to publish.
	others bool
}

// rowQuerier is what earliestOpen reads with: the store's DB or a
// transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// earliestOpen returns agg's earliest open row; ok is false when it has
// none. except names a row about to be discarded, which is not published:
// others reports whether any other row is open.
func (s *Store) earliestOpen(ctx context.Context, db rowQuerier, agg Aggregate, except string) (e earliest, ok bool, err error) {
	var lsn string
	err = db.QueryRow(ctx, `SELECT event_id, tx_lsn::text AS tx_lsn_text, tx_ordinal, NOT `+sameSystem+`,
			EXISTS (SELECT 1 FROM `+s.table+` WHERE outbox_table = $1 AND aggregate_type = $2 AND aggregate_id = $3
				AND status IN ('dead', 'parked') AND event_id <> $4)
		FROM `+s.table+` WHERE outbox_table = $1 AND aggregate_type = $2 AND aggregate_id = $3 AND status IN ('dead', 'parked')
		ORDER BY `+sameSystem+`, tx_lsn, tx_ordinal LIMIT 1`, s.outbox, agg.Type, agg.ID, except).
		Scan(&e.eventID, &lsn, &e.pos.Ordinal, &e.foreign, &e.others)
	if errors.Is(err, pgx.ErrNoRows) {
		return e, false, nil
	}
	if err != nil {
		return e, false, fmt.Errorf("read the earliest open event of %s: %w", agg, err)
	}
	e.pos.TxLSN, err = pglogrepl.ParseLSN(lsn)
	return e, true, err
}

// ahead returns an *AheadError when the resolve of agg would publish
// something while its earliest open row is not behind the relay's
// delivered position, nil when it may go ahead.
func (s *Store) ahead(ctx context.Context, db rowQuerier, agg Aggregate, except string, g Guard) (*AheadError, error) {
	e, ok, err := s.earliestOpen(ctx, db, agg, except)
	if err != nil || !ok || !e.others || e.foreign {
		return nil, err
	}
	if g.Progress == nil {
		return nil, errors.New("dead-letter: a retry or discard needs the relay's position (Guard.Progress)")
	}
	d, err := g.Progress.Delivered(ctx, e.pos.TxLSN)
	if err != nil {
		return nil, fmt.Errorf("read the relay's delivered position: %w", err)
	}
	if d.Passes(e.pos.TxLSN) {
		return nil, nil
	}
	return &AheadError{Aggregate: agg, EventID: e.eventID, Pos: e.pos, Delivered: d}, nil
}

// awaitBehind waits, at most g.Wait, until the resolve of agg may go
// ahead (ahead returns nil), and returns the last *AheadError otherwise.
// It holds no lock: the relay may need the aggregate's to replay the
// range that moves its position past the row.
func (s *Store) awaitBehind(ctx context.Context, agg Aggregate, except string, g Guard) error {
	start := time.Now()
	a, err := s.ahead(ctx, s.db, agg, except, g)
	if err != nil || a == nil {
		return err
	}
	if g.Wait <= 0 {
		return a
	}
	if g.OnWait != nil {
		g.OnWait(a)
	}
	if g.Log != nil {
		g.Log.Info("waiting for the relay's position to pass the aggregate's earliest open event before publishing",
			slog.String("stage", "dlq"), slog.String("event_id", a.EventID), slog.String("aggregate_type", a.Aggregate.Type),
			slog.String("aggregate_id", a.Aggregate.ID), slog.String("tx_lsn", a.Pos.TxLSN.String()),
			slog.String("delivered", a.Delivered.String()), slog.Duration("wait", g.Wait))
	}
	poll := g.Poll
	if poll <= 0 {
		poll = defaultPoll
	}
	deadline := time.NewTimer(g.Wait)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			a.Waited = time.Since(start)
			return a
		case <-tick.C:
		}
		next, err := s.ahead(ctx, s.db, agg, except, g)
		if err != nil || next == nil {
			return err
		}
		a = next
	}
}
