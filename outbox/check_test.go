package outbox

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// refuseChecker refuses the events whose payload is `"bad"` with err,
// and records what it was asked.
type refuseChecker struct {
	mu   sync.Mutex
	err  error
	seen []*Event
}

func (c *refuseChecker) Check(_ context.Context, e *Event) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, e)
	if string(e.Payload) == `"bad"` {
		return c.err
	}
	return nil
}

// The package's schema check is outboxschema's (tested there against a
// fake registry); this is the hook it plugs into.
func TestEventCheckRefusesBeforeAnySQL(t *testing.T) {
	want := errors.New("the check's own error")
	c := &refuseChecker{err: want}
	w := NewWriter(testTable, WithEventCheck(c))
	ctx := context.Background()
	r := &recorder{}

	bad := validEvent()
	bad.Payload = []byte(`"bad"`)
	if err := w.Append(ctx, r, bad); err != want { // unchanged: not even wrapped
		t.Fatalf("Append = %v, want the check's error as it is", err)
	}
	if len(r.calls) != 0 || bad.EventID != uuid.Nil {
		t.Fatalf("refused: %d INSERTs, EventID %v; want none and unchanged", len(r.calls), bad.EventID)
	}
	if err := w.Append(ctx, r, validEvent()); err != nil || len(r.calls) != 1 {
		t.Fatalf("passed: %v, %d INSERTs", err, len(r.calls))
	}

	// An invalid event is refused by Validate, before the check is asked.
	c.seen = nil
	invalid := validEvent()
	invalid.AggregateID = ""
	if err := w.Append(ctx, r, invalid); !errors.Is(err, ErrInvalidEvent) || len(c.seen) != 0 {
		t.Fatalf("invalid event: %v, checked %d times", err, len(c.seen))
	}
	// Validate leaves the check out.
	if err := w.Validate(bad); err != nil || len(c.seen) != 0 {
		t.Fatalf("Validate: %v, checked %d times", err, len(c.seen))
	}

	// A batch: every event checked before the first INSERT.
	r.calls = nil
	err := w.AppendBatch(ctx, r, []*Event{validEvent(), bad})
	if !errors.Is(err, want) || !strings.HasPrefix(err.Error(), "event 1 of 2: ") || len(r.calls) != 0 {
		t.Fatalf("batch: %v, %d INSERTs", err, len(r.calls))
	}

	// A transition: checked before its change, once.
	tx := &transitionTx{rows: 1, returned: []int64{7}}
	tr := confirmTransition()
	tr.Event.Payload = []byte(`"bad"`)
	if err := w.Transition(ctx, tx, tr); err != want || len(tx.changes) != 0 || len(tx.calls) != 0 {
		t.Fatalf("transition: %v, %d changes, %d INSERTs; want refused before the change", err, len(tx.changes), len(tx.calls))
	}
	c.seen = nil
	tr = confirmTransition()
	if err := w.Transition(ctx, tx, tr); err != nil || len(tx.changes) != 1 || len(tx.calls) != 1 || len(c.seen) != 1 {
		t.Fatalf("transition: %v, %d changes, %d INSERTs, checked %d times", err, len(tx.changes), len(tx.calls), len(c.seen))
	}
}

func TestWithEventCheckNilChecksNothing(t *testing.T) {
	w := NewWriter(testTable, WithEventCheck(nil))
	r := &recorder{}
	if err := w.Append(context.Background(), r, validEvent()); err != nil || len(r.calls) != 1 {
		t.Fatalf("Append = %v, %d INSERTs", err, len(r.calls))
	}
}
