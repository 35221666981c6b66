package inbox

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// permanentError marks a handler error that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as a permanent failure: the event is not retried but
// handled by the Policy at once (dead-lettered, or the consumer halts).
// Other handler errors are retried with backoff up to Config.MaxAttempts.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ErrExpectation is wrapped by the error of ExpectRows.
var ErrExpectation = errors.New("expectation failed")

// ExpectRows checks that a statement changed exactly want rows. A mismatch
// is a permanent error wrapping ErrExpectation: the transaction rolls back,
// so the event is not marked processed, and the Policy applies. It is the
// usual check of a version-guarded update
// ("UPDATE … SET version = $v WHERE id = $id AND version = $v - 1"):
// zero rows means the handler saw an event out of order or a gap.
func ExpectRows(tag pgconn.CommandTag, want int64) error {
	if got := tag.RowsAffected(); got != want {
		return Permanent(fmt.Errorf("%w: %q changed %d rows, want %d", ErrExpectation, tag.String(), got, want))
	}
	return nil
}

// HaltError stops Consumer.Run under PolicyHalt. The event's offset is not
// committed, so after a restart it is delivered again.
type HaltError struct {
	EventID     string
	AggregateID string
	Reason      string
}

func (e *HaltError) Error() string {
	return fmt.Sprintf("event %s (aggregate %s) failed permanently: %s; policy is halt, so the consumer stops before its offset "+
		"(fix the handler or the data and restart, or use PolicyWait to dead-letter it and let other aggregates go on)",
		e.EventID, e.AggregateID, e.Reason)
}
