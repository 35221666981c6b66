package inbox

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/poison"
)

// ErrExpectation is wrapped by the error of ExpectRows.
var ErrExpectation = errors.New("expectation failed")

// ExpectRows checks that a statement changed exactly want rows. A mismatch
// is a poison.Permanent error wrapping ErrExpectation: the transaction
// rolls back, so the event is not marked processed, and Config.Policy
// applies at once, without retries. It is the usual check of a
// version-guarded update
// ("UPDATE … SET version = $v WHERE id = $id AND version = $v - 1"):
// zero rows means the handler saw an event out of order or a gap.
func ExpectRows(tag pgconn.CommandTag, want int64) error {
	if got := tag.RowsAffected(); got != want {
		return poison.Permanent(fmt.Errorf("%w: %q changed %d rows, want %d", ErrExpectation, tag.String(), got, want))
	}
	return nil
}
