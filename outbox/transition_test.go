package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// transitionTx is a Tx whose Change answers with canned results and
// whose Exec records the outbox inserts.
type transitionTx struct {
	recorder
	rows      int64
	returned  []int64
	changeErr error
	changes   []call
}

func (f *transitionTx) Change(_ context.Context, sql string, args ...any) (int64, []int64, error) {
	f.changes = append(f.changes, call{sql: sql, args: args})
	return f.rows, f.returned, f.changeErr
}

// conflictMetrics counts TransitionConflict calls by label pair.
type conflictMetrics struct {
	nopMetrics
	mu        sync.Mutex
	conflicts map[[2]string]int
}

func (m *conflictMetrics) TransitionConflict(aggregateType, eventType string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conflicts == nil {
		m.conflicts = map[[2]string]int{}
	}
	m.conflicts[[2]string{aggregateType, eventType}]++
}

const confirmSQL = `UPDATE orders SET status = 'confirmed', version = version + 1 WHERE id = $1 AND status = 'pending' RETURNING version`

func confirmTransition() Transition {
	e := validEvent()
	e.AggregateVersion = 0
	return Transition{SQL: confirmSQL, Args: []any{"o-1"}, Event: e}
}

func TestTransitionReturningSetsVersion(t *testing.T) {
	m := &conflictMetrics{}
	w := NewWriter(testTable, WithMetrics(m))
	tx := &transitionTx{rows: 1, returned: []int64{7}}
	tr := confirmTransition()
	if err := w.Transition(context.Background(), tx, tr); err != nil {
		t.Fatal(err)
	}
	if len(tx.changes) != 1 || tx.changes[0].sql != confirmSQL || !slices.Equal(tx.changes[0].args, []any{"o-1"}) {
		t.Fatalf("changes = %+v", tx.changes)
	}
	if len(tx.calls) != 1 {
		t.Fatalf("got %d inserts, want 1", len(tx.calls))
	}
	if got := tx.calls[0].args[3]; got != int64(7) {
		t.Fatalf("aggregate_version bound as %v, want 7", got)
	}
	if tr.Event.AggregateVersion != 7 || tr.Event.EventID == uuid.Nil {
		t.Fatalf("event after Transition: version %d, id %v", tr.Event.AggregateVersion, tr.Event.EventID)
	}
	if len(m.conflicts) != 0 {
		t.Fatalf("conflicts counted on success: %v", m.conflicts)
	}
}

func TestTransitionRowsAffectedWithoutReturning(t *testing.T) {
	w := NewWriter(testTable)
	tx := &transitionTx{rows: 1}
	tr := confirmTransition()
	tr.Event.AggregateVersion = 5 // the caller's own version
	if err := w.Transition(context.Background(), tx, tr); err != nil {
		t.Fatal(err)
	}
	if len(tx.calls) != 1 || tx.calls[0].args[3] != int64(5) {
		t.Fatalf("inserts = %+v, want one with version 5", tx.calls)
	}
}

func TestTransitionConflict(t *testing.T) {
	mine := errors.New("order is not pending")
	for _, tc := range []struct {
		name    string
		invalid error
		want    error
	}{
		{"default", nil, ErrInvalidTransition},
		{"caller's error", mine, mine},
		{"caller's wrapped error", wrapErr{mine}, mine},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &conflictMetrics{}
			w := NewWriter(testTable, WithMetrics(m))
			tx := &transitionTx{rows: 0}
			tr := confirmTransition()
			tr.Invalid = tc.invalid
			err := w.Transition(context.Background(), tx, tr)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if tc.invalid != nil && err != tc.invalid {
				t.Fatalf("err = %#v, want the caller's error as given", err)
			}
			if len(tx.calls) != 0 || tr.Event.EventID != uuid.Nil {
				t.Fatalf("appended on conflict: %+v (event id %v)", tx.calls, tr.Event.EventID)
			}
			if got := m.conflicts[[2]string{"order", "order.confirmed"}]; got != 1 || len(m.conflicts) != 1 {
				t.Fatalf("conflicts = %v, want order/order.confirmed: 1", m.conflicts)
			}
		})
	}
}

type wrapErr struct{ err error }

func (e wrapErr) Error() string { return "domain: " + e.err.Error() }
func (e wrapErr) Unwrap() error { return e.err }

func TestTransitionUnexpectedRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expect int64
		rows   int64
		want   string
	}{
		{"more than one", 0, 2, "changed 2 rows, want 1"},
		{"more than expected", 3, 4, "changed 4 rows, want 3"},
		{"fewer but not zero", 3, 2, "changed 2 rows, want 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &conflictMetrics{}
			w := NewWriter(testTable, WithMetrics(m))
			tx := &transitionTx{rows: tc.rows}
			tr := confirmTransition()
			tr.ExpectRows = tc.expect
			err := w.Transition(context.Background(), tx, tr)
			if !errors.Is(err, ErrUnexpectedRows) || errors.Is(err, ErrInvalidTransition) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrUnexpectedRows mentioning %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "order.confirmed of order o-1") {
				t.Fatalf("err = %v, want it to name the event and aggregate", err)
			}
			if len(tx.calls) != 0 || len(m.conflicts) != 0 {
				t.Fatalf("appended %d, conflicts %v: want neither", len(tx.calls), m.conflicts)
			}
		})
	}
}

func TestTransitionExpectRowsMatched(t *testing.T) {
	w := NewWriter(testTable)
	tx := &transitionTx{rows: 3, returned: []int64{4, 4, 4}}
	tr := confirmTransition()
	tr.ExpectRows = 3
	if err := w.Transition(context.Background(), tx, tr); err != nil {
		t.Fatal(err)
	}
	if len(tx.calls) != 1 || tr.Event.AggregateVersion != 4 {
		t.Fatalf("inserts %d, version %d", len(tx.calls), tr.Event.AggregateVersion)
	}

	tx = &transitionTx{rows: 2, returned: []int64{4, 5}}
	tr = confirmTransition()
	tr.ExpectRows = 2
	err := w.Transition(context.Background(), tx, tr)
	if err == nil || !strings.Contains(err.Error(), "different versions") || len(tx.calls) != 0 {
		t.Fatalf("err = %v, inserts %d: want a refusal of two versions", err, len(tx.calls))
	}
}

func TestTransitionRefusesBeforeSQL(t *testing.T) {
	bad := confirmTransition()
	bad.Event.EventType = ""
	noSQL := confirmTransition()
	noSQL.SQL = ""
	negative := confirmTransition()
	negative.ExpectRows = -1
	for name, tc := range map[string]struct {
		tr   Transition
		want string
	}{
		"invalid event": {bad, "event_type is empty"},
		"nil event":     {Transition{SQL: confirmSQL}, "event is nil"},
		"no SQL":        {noSQL, "no SQL"},
		"negative rows": {negative, "must not be negative"},
	} {
		tx := &transitionTx{rows: 1}
		err := NewWriter(testTable).Transition(context.Background(), tx, tc.tr)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
		if len(tx.changes)+len(tx.calls) != 0 {
			t.Errorf("%s: SQL ran: %+v %+v", name, tx.changes, tx.calls)
		}
	}
}

func TestTransitionNegativeReturnedVersion(t *testing.T) {
	tx := &transitionTx{rows: 1, returned: []int64{-1}}
	err := NewWriter(testTable).Transition(context.Background(), tx, confirmTransition())
	if !errors.Is(err, ErrInvalidEvent) || len(tx.calls) != 0 {
		t.Fatalf("err = %v, inserts %d", err, len(tx.calls))
	}
}

func TestTransitionChangeAndAppendErrors(t *testing.T) {
	boom := errors.New("deadlock detected")
	tx := &transitionTx{changeErr: boom}
	err := NewWriter(testTable).Transition(context.Background(), tx, confirmTransition())
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "transition order.confirmed of order o-1") || len(tx.calls) != 0 {
		t.Fatalf("err = %v, inserts %d", err, len(tx.calls))
	}

	tx = &transitionTx{rows: 1, returned: []int64{2}}
	tx.err = errors.New("disk full")
	err = NewWriter(testTable).Transition(context.Background(), tx, confirmTransition())
	if err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("err = %v, want the insert's error", err)
	}
}

// Tx values from PgxTx and SQLTx still satisfy Execer, so existing calls
// of Append compile unchanged.
var (
	_ Execer = PgxTx(nil)
	_ Execer = SQLTx(nil)
)

func TestHasReturning(t *testing.T) {
	for sql, want := range map[string]bool{
		confirmSQL: true,
		`update t set a = 1 where id = $1 returning version`:                   true,
		"UPDATE t SET a = 1\nRETURNING\tversion":                               true,
		`WITH u AS (UPDATE t SET a = 1 RETURNING v) SELECT v FROM u`:           true,
		`UPDATE t SET a = 1 WHERE id = $1`:                                     false,
		`UPDATE t SET note = 'returning' WHERE id = $1`:                        false,
		`UPDATE t SET note = 'it''s returning' WHERE id = $1`:                  false,
		`UPDATE t SET note = E'\' returning' WHERE id = $1`:                    false,
		`UPDATE t SET note = E'\\' RETURNING v`:                                true,
		`UPDATE t SET note = $$ returning $$ WHERE id = $1`:                    false,
		`UPDATE t SET note = $q$ returning $ $q$ WHERE id = $1`:                false,
		`UPDATE t SET "returning" = 1 WHERE id = $1`:                           false,
		`UPDATE t SET returning_at = now(), at_returning = 1 WHERE id = $1`:    false,
		`UPDATE t SET a$returning = 1 WHERE id = $1`:                           false,
		"UPDATE t SET a = 1 -- returning v\nWHERE id = $1":                     false,
		`UPDATE t SET a = 1 /* returning /* nested */ returning */ WHERE x`:    false,
		`UPDATE t SET a = 1 /* c */ RETURNING v`:                               true,
		`UPDATE t SET a = $1 RETURNING v`:                                      true,
		`UPDATE t SET a = 1 WHERE b = $tag$ unterminated returning`:            false,
		`UPDATE t SET e = 'x' WHERE id = $1 RETURNING v`:                       true,
		`UPDATE t SET note = xE'\' returning' WHERE id = 1`:                    true, // xE is a word: no escapes
		`UPDATE t SET a = 1 RETURNINGS`:                                        false,
		"UPDATE t SET a = 1 RETURNING":                                         true,
		"":                                                                     false,
		`DELETE FROM t WHERE id = $1 AND status = 'pending' Returning version`: true,
	} {
		if got := hasReturning(sql); got != want {
			t.Errorf("hasReturning(%q) = %v, want %v", sql, got, want)
		}
	}
}

func FuzzHasReturning(f *testing.F) {
	f.Add(confirmSQL)
	f.Add(`UPDATE t SET note = E'\' returning' WHERE id = $1`)
	f.Add(`/* /* */ $a$ $$ "x""y" 'z''`)
	f.Fuzz(func(t *testing.T, s string) {
		hasReturning(s) // must not panic or hang
	})
}

// Back-pressure refuses a low-priority transition before its change runs
// (the aggregate stays as it was) and lets a critical one through; the
// refusal is counted once, not as a conflict.
func TestTransitionBackpressure(t *testing.T) {
	met := &metricsRecorder{}
	w := NewWriter(testTable, WithBackpressure(engagedMonitor(t, false)), WithMetrics(met))
	tx := &transitionTx{rows: 1, returned: []int64{2}}
	low := confirmTransition()
	low.Event.Priority, low.Event.EventType = PriorityLow, "order.viewed"
	err := w.Transition(context.Background(), tx, low)
	if !errors.Is(err, ErrBackpressure) || errors.Is(err, ErrInvalidTransition) {
		t.Fatalf("err = %v, want ErrBackpressure", err)
	}
	if len(tx.changes)+len(tx.calls) != 0 || low.Event.EventID != uuid.Nil || low.Event.AggregateVersion != 0 {
		t.Fatalf("refused transition ran SQL (%d changes, %d inserts) or filled the event", len(tx.changes), len(tx.calls))
	}
	if fmt.Sprint(met.refused) != "map[soft order.viewed:1]" {
		t.Fatalf("refused = %v, want one soft refusal", met.refused)
	}
	if err := w.Transition(context.Background(), tx, confirmTransition()); err != nil || len(tx.changes) != 1 || len(tx.calls) != 1 {
		t.Fatalf("critical transition: %v, %d changes, %d inserts", err, len(tx.changes), len(tx.calls))
	}
}
