package outbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrInvalidTransition is what Writer.Transition returns when the
// conditional change matched no row and the Transition names no error of
// its own: the aggregate was not in the state the command requires, most
// often because a concurrent command changed it first. Nothing was
// written; the caller's transaction may commit or roll back, both leave
// the database as it was. It is not worth retrying as is: reload the
// aggregate and decide again.
var ErrInvalidTransition = errors.New("outbox: invalid transition")

// ErrUnexpectedRows is wrapped by the error Writer.Transition returns when
// the change affected a number of rows other than zero and
// Transition.ExpectRows: the WHERE clause is not specific enough (a bug,
// not a race). No event was appended, but the change itself ran: the
// caller must roll its transaction back.
var ErrUnexpectedRows = errors.New("outbox: transition changed an unexpected number of rows")

// Transition is one state change of an aggregate and the event that
// announces it, run by Writer.Transition in the caller's transaction.
//
// The change must be conditional on the state it starts from (WHERE status
// = 'pending'), so that of two concurrent commands only one changes the
// row: PostgreSQL's row lock makes the second wait, then re-check the
// condition against the committed row and match nothing. That second
// command therefore records no event, and no two contradicting facts are
// ever published.
type Transition struct {
	// SQL is the conditional change, e.g.
	//	UPDATE orders SET status = 'confirmed', version = version + 1
	//	WHERE id = $1 AND status = 'pending' RETURNING version
	// With RETURNING of one integer column (the aggregate's version after
	// the change), the value sets Event.AggregateVersion; without it, the
	// rows-affected count alone decides and Event.AggregateVersion is
	// written as given.
	SQL string
	// Args are SQL's positional arguments ($1, $2, ...).
	Args []any
	// Event is appended, in the same transaction, only when the change
	// affected ExpectRows rows. Required; it is validated before SQL runs,
	// so an invalid event never changes the aggregate.
	Event *Event
	// ExpectRows is the number of rows the change must affect (0 means
	// 1). Zero rows is a conflict; any other count is an error wrapping
	// ErrUnexpectedRows.
	ExpectRows int64
	// Invalid is returned when the change affected no row (nil means
	// ErrInvalidTransition). Give a domain error (ErrOrderNotPending) so
	// callers can map it, with errors.Is, to e.g. HTTP 409.
	Invalid error
}

// Transition runs t.SQL in tx and, when it changed exactly t.ExpectRows
// rows, appends t.Event in the same transaction, with its
// AggregateVersion taken from the RETURNING column if there is one (both
// written back into t.Event, as Append does with EventID). It neither
// commits nor rolls back.
//
// When the change affected no row, Transition counts a conflict
// (Metrics.TransitionConflict with the event's aggregate and event type,
// outbox_producer_transition_conflicts_total in package outboxprom),
// appends nothing and returns t.Invalid, or ErrInvalidTransition. Any
// other row count returns an error wrapping ErrUnexpectedRows, also
// without appending: roll back then, since the change did run. An invalid
// t.Event is refused before any SQL (a *ValidationError, as from Append),
// and so is one that back-pressure refuses (WithBackpressure: a
// *BackpressureError, errors.Is(err, ErrBackpressure)), and one the
// event check refuses (WithEventCheck: the check's error). Roll back on any
// error: when the append fails after the change, the change did run.
//
// Use it with a pgx transaction through PgxTx, or a database/sql one
// through SQLTx (see SQLTx for how it recognises RETURNING).
//
// The event, payload included, is built before the change runs; only its
// AggregateVersion comes from RETURNING, and it reaches consumers as the
// record's aggregate_version header, so a payload need not repeat it.
//
// Under READ COMMITTED (PostgreSQL's default) a command that loses a race
// waits for the winner's row lock, re-checks the WHERE clause against the
// committed row and gets the conflict. Under REPEATABLE READ or
// SERIALIZABLE it gets a serialization failure (SQLSTATE 40001) instead:
// retry the whole transaction, and the retry sees the new state and gets
// the conflict.
func (w *Writer) Transition(ctx context.Context, tx Tx, t Transition) error {
	if err := w.Validate(t.Event); err != nil {
		return err
	}
	if t.SQL == "" {
		return errors.New("outbox: transition has no SQL")
	}
	// Back-pressure refuses before the change, so a refused event leaves
	// the aggregate as it was (Append checks again, after the change).
	if be := w.admit(t.Event); be != nil {
		return be
	}
	// So does the event check: it runs once, here, before the change,
	// so a refused event leaves the change unrun (a check therefore must
	// not depend on the AggregateVersion RETURNING gives).
	if err := w.check(ctx, t.Event); err != nil {
		return err
	}
	want := t.ExpectRows
	if want == 0 {
		want = 1
	}
	if want < 0 {
		return fmt.Errorf("outbox: transition ExpectRows must not be negative (got %d)", t.ExpectRows)
	}
	e := t.Event
	n, returned, err := tx.Change(ctx, t.SQL, t.Args...)
	if err != nil {
		return fmt.Errorf("transition %s of %s %s: %w", e.EventType, e.AggregateType, e.AggregateID, err)
	}
	if n == 0 {
		w.metrics.TransitionConflict(e.AggregateType, e.EventType)
		if t.Invalid != nil {
			return t.Invalid
		}
		return ErrInvalidTransition
	}
	if n != want {
		return fmt.Errorf("%w: %s of %s %s changed %d rows, want %d (is the WHERE clause specific enough? roll back)",
			ErrUnexpectedRows, e.EventType, e.AggregateType, e.AggregateID, n, want)
	}
	if len(returned) > 0 {
		v := returned[0]
		for _, o := range returned[1:] {
			if o != v {
				return fmt.Errorf("transition %s of %s %s: the %d changed rows returned different versions (%d and %d); return one aggregate version",
					e.EventType, e.AggregateType, e.AggregateID, n, v, o)
			}
		}
		if v < 0 {
			return &ValidationError{EventID: e.EventID, Problems: []string{
				fmt.Sprintf("aggregate_version must not be negative (RETURNING gave %d)", v)}}
		}
		e.AggregateVersion = v
	}
	return w.append(ctx, tx, e, false)
}
