package deadletter

import (
	"context"
	"errors"
	"testing"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
)

// After a poison event, every later event of its aggregate is parked (the
// row is committed when Hold returns), earlier ones and other aggregates
// flow, and redeliveries write nothing twice.
func TestDBQuarantineParksLaterEvents(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	if q.Quarantined() != 0 {
		t.Fatalf("fresh table: %d quarantined", q.Quarantined())
	}
	parked := 0
	q.OnPark = func() { parked++ }
	mustPoison(t, q, event("p", "order", "9", 0x500, 1))
	mustPoison(t, q, event("p", "order", "9", 0x500, 1)) // redelivered before the slot moved past it

	cases := []struct {
		ev   *replication.WALEvent
		held bool
		row  string
	}{
		{event("before", "order", "9", 0x500, 0), false, ""},
		{event("p", "order", "9", 0x500, 1), true, StatusDead},
		{event("same-tx", "order", "9", 0x500, 2), true, StatusParked},
		{event("later", "order", "9", 0x600, 0), true, StatusParked},
		{event("later", "order", "9", 0x600, 0), true, StatusParked}, // redelivered
		{event("other", "order", "10", 0x600, 1), false, ""},
	}
	for _, c := range cases {
		if got := hold(t, q, c.ev); got != c.held {
			t.Errorf("Hold(%s at %v) = %v, want %v", c.ev.EventID, c.ev.Pos(), got, c.held)
		}
		if got := e.status(t, c.ev.EventID); got != c.row {
			t.Errorf("row of %s: status %q, want %q", c.ev.EventID, got, c.row)
		}
	}
	if parked != 3 {
		t.Errorf("OnPark called %d times, want 3", parked)
	}
	entries, err := e.store.List(e.ctx, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 || entries[0].Attempts != 1 {
		t.Fatalf("redeliveries wrote rows twice: %+v", entries)
	}
	if q.Quarantined() != 1 {
		t.Fatalf("Quarantined = %d", q.Quarantined())
	}
	if p, err := e.store.Get(e.ctx, "later"); err != nil || p.Class != "permanent" || p.Topic != "orders" || p.Reason == "" {
		t.Fatalf("parked row %+v, %v", p, err)
	}
}

// The quarantine starts at the aggregate's earliest poison event: a second
// poison event later does not let the events between them through, and an
// earlier one (the lanes report out of order) moves the start back.
func TestDBQuarantineKeepsEarliestPosition(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p1", "order", "9", 0x500, 0))
	mustPoison(t, q, event("p2", "order", "9", 0x700, 0))
	if !hold(t, q, event("between", "order", "9", 0x600, 0)) {
		t.Fatal("an event between two poison events was published")
	}
	mustPoison(t, q, event("p0", "order", "9", 0x300, 0))
	if !hold(t, q, event("after-p0", "order", "9", 0x400, 0)) {
		t.Fatal("an event after an earlier poison event was published")
	}
	if hold(t, q, event("before-p0", "order", "9", 0x200, 0)) {
		t.Fatal("an event before every poison event was held")
	}
	// A new quarantine (a restart, another leader) starts at the same place.
	q2 := e.quarantine(t, poison.Quarantine)
	if !hold(t, q2, event("after-p0-again", "order", "9", 0x300, 1)) {
		t.Fatal("reloaded quarantine does not start at the earliest open row")
	}
}

// Reload replaces what the quarantine knows: aggregates quarantined by
// another leader appear, lifted ones disappear.
func TestDBReload(t *testing.T) {
	e := newDBEnv(t)
	standby := e.quarantine(t, poison.Quarantine)
	leader := e.quarantine(t, poison.Quarantine)
	mustPoison(t, leader, event("p", "order", "9", 0x500, 0))
	late := event("late", "order", "9", 0x600, 0)
	if standby.Quarantines(late) {
		t.Fatal("standby knows before reloading")
	}
	if err := standby.Reload(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if !standby.Quarantines(late) || standby.Quarantined() != 1 || !hold(t, standby, late) {
		t.Fatal("after Reload the standby must park the aggregate's later events")
	}
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, &recWriter{}, caughtUp); err != nil {
		t.Fatal(err)
	}
	if err := standby.Reload(e.ctx, 0); err != nil {
		t.Fatal(err)
	}
	if standby.Quarantined() != 0 || standby.Quarantines(late) {
		t.Fatal("a lifted quarantine survived Reload")
	}
}

// An operator lifted the quarantine while the relay still had it in
// memory: the next event is published, not parked, and the aggregate is
// forgotten.
func TestDBHoldAfterLift(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p", "order", "9", 0x500, 0))
	if !hold(t, q, event("parked", "order", "9", 0x550, 0)) {
		t.Fatal("not parked")
	}
	res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, &recWriter{}, caughtUp)
	if err != nil || !res.Lifted {
		t.Fatalf("Retry = %+v, %v", res, err)
	}
	if hold(t, q, event("next", "order", "9", 0x600, 0)) {
		t.Fatal("an event after a lifted quarantine was parked")
	}
	if e.status(t, "next") != "" || q.Quarantined() != 0 {
		t.Fatalf("row %q, %d quarantined", e.status(t, "next"), q.Quarantined())
	}
}

// Dead letters of another PostgreSQL system (a dump restored into a new
// cluster, whose LSNs start lower) are earlier than every new event of
// their aggregate; rows from before migration 5 (no system identifier)
// keep their LSNs.
func TestDBForeignSystemQuarantine(t *testing.T) {
	e := newDBEnv(t)
	old := e.quarantine(t, poison.Quarantine)
	mustPoison(t, old, event("foreign", "order", "F", 0x9000, 0))
	e.setSystem(t, "foreign", "6900000000000000001")
	mustPoison(t, old, event("legacy", "order", "L", 0x9000, 0))
	e.setSystem(t, "legacy", nil)

	q := e.quarantine(t, poison.Quarantine)
	if !hold(t, q, event("new-f", "order", "F", 0x100, 0)) {
		t.Fatal("a new event of an aggregate dead-lettered on another system was published ahead of it")
	}
	if hold(t, q, event("new-l", "order", "L", 0x100, 0)) {
		t.Fatal("a row without a system identifier was not taken as this system's")
	}
	w := &recWriter{}
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "F"}, w, caughtUp); err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); len(got) != 2 || got[0] != "foreign" || got[1] != "new-f" {
		t.Fatalf("Retry published %v, want the foreign poison event first", got)
	}
}

// gateWriter blocks in Write until released, so a test can act while a
// retry holds the aggregate's lock.
type gateWriter struct {
	started chan struct{}
	release chan struct{}
	fail    error
	got     []string
}

func (w *gateWriter) Write(ctx context.Context, ev *replication.WALEvent) error {
	if w.started != nil {
		close(w.started)
		w.started = nil
		select {
		case <-w.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if w.fail != nil {
		return w.fail
	}
	w.got = append(w.got, ev.EventID)
	return nil
}

// An event that arrives while an operator's retry re-publishes its
// aggregate waits for the retry: published after the retried events when
// the quarantine is lifted, parked behind them when it is not, never in
// between.
func TestDBHoldWaitsForRetry(t *testing.T) {
	for _, c := range []struct {
		name   string
		fail   error
		parked bool
	}{
		{"retry succeeds", nil, false},
		{"retry fails", errors.New("still too large"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newDBEnv(t)
			q := e.quarantine(t, poison.Quarantine)
			mustPoison(t, q, event("p", "order", "9", 0x500, 0))

			w := &gateWriter{started: make(chan struct{}), release: make(chan struct{}), fail: c.fail}
			started := w.started
			type result struct {
				res Result
				err error
			}
			retried := make(chan result, 1)
			go func() {
				res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp)
				retried <- result{res, err}
			}()
			<-started
			type held struct {
				ok  bool
				err error
			}
			holds := make(chan held, 1)
			go func() {
				ok, err := q.Hold(e.ctx, event("late", "order", "9", 0x600, 0), "orders")
				holds <- held{ok, err}
			}()
			// Hold waits for the retry's lock (or returned: caught below).
			e.awaitLockWaiter(t, Aggregate{"order", "9"}, func() bool { return len(holds) > 0 })
			select {
			case h := <-holds:
				t.Fatalf("Hold returned %v, %v while the retry held the aggregate's lock", h.ok, h.err)
			default:
			}
			close(w.release)
			r := <-retried
			if r.err != nil || r.res.Lifted == c.parked {
				t.Fatalf("Retry = %+v, %v", r.res, r.err)
			}
			h := <-holds
			if h.err != nil || h.ok != c.parked {
				t.Fatalf("Hold after the retry = %v, %v; want %v", h.ok, h.err, c.parked)
			}
			want := ""
			if c.parked {
				want = StatusParked
			}
			if got := e.status(t, "late"); got != want {
				t.Fatalf("late event's row: %q, want %q", got, want)
			}
		})
	}
}

// A range comes again when the stream restarts behind it. A retry or
// discard now waits for the relay's position to pass the range (Guard,
// TestDBRetryWaitsForAbortedRange), but the stream can still restart
// before a position it had passed: the slot moves back after a PostgreSQL
// crash, a checkpoint of another timeline is not applied after a
// promotion. When an operator resolved its dead and parked events in between, the
// redelivered events are taken care of, not published a second time (a
// dlq retry published them) or at all (a discard): whether the retry ran
// while this quarantine was loaded (the event's own row is read under the
// aggregate's lock) or before a restart (Reload keeps the resolved events
// at or after the stream's start). Issue 35: before, each was published
// again, and a discarded poison event that no longer failed reached
// consumers.
func TestDBRedeliveryAfterResolve(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	agg := Aggregate{"order", "9"}
	p := event("p", "order", "9", 0x500, 0)
	a := event("a", "order", "9", 0x500, 1)
	b := event("b", "order", "9", 0x600, 0)
	mustPoison(t, q, p)
	for _, ev := range []*replication.WALEvent{a, b} {
		if !hold(t, q, ev) {
			t.Fatalf("%s not parked", ev.EventID)
		}
	}
	w := &recWriter{}
	if res, err := e.store.Retry(e.ctx, agg, w, caughtUp); err != nil || !res.Lifted || len(w.got) != 3 {
		t.Fatalf("Retry = %+v, %v (%d written)", res, err, len(w.got))
	}

	// The retry ran while the quarantine was in memory: the stream comes
	// back to p, a and b (the range was aborted), then to a new event.
	for _, ev := range []*replication.WALEvent{p, a, b} {
		if !hold(t, q, ev) {
			t.Errorf("redelivered %s after the retry: published again", ev.EventID)
		}
	}
	next := event("next", "order", "9", 0x700, 0)
	if hold(t, q, next) || q.Quarantined() != 0 {
		t.Errorf("the event after the retried ones: %d quarantined; want it published and the quarantine lifted", q.Quarantined())
	}

	// A restart: the stream starts at 0x500 (the position never passed
	// the range); the retried events are known before they come again.
	q2 := e.quarantine(t, poison.Quarantine)
	if err := q2.Reload(e.ctx, 0x500); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*replication.WALEvent{p, a, b} {
		if !q2.Quarantines(ev) || !hold(t, q2, ev) {
			t.Errorf("redelivered %s after a restart: published again", ev.EventID)
		}
	}
	if q2.Quarantines(next) || hold(t, q2, next) {
		t.Errorf("an event nobody resolved was held")
	}
	// A stream that starts past them knows none of them.
	q3 := e.quarantine(t, poison.Quarantine)
	if err := q3.Reload(e.ctx, 0x601); err != nil {
		t.Fatal(err)
	}
	if q3.Quarantines(p) || q3.Quarantines(b) {
		t.Errorf("events before the stream's start kept in memory")
	}

	// A discarded poison event is never published, even when it would
	// now go through; its parked successor, published by the discard, is
	// not published twice.
	d := event("d", "invoice", "1", 0x800, 0)
	c := event("c", "invoice", "1", 0x900, 0)
	mustPoison(t, q, d)
	if !hold(t, q, c) {
		t.Fatal("c not parked")
	}
	if _, err := e.store.Discard(e.ctx, "d", "bad row", &recWriter{}, caughtUp); err != nil {
		t.Fatal(err)
	}
	q4 := e.quarantine(t, poison.Quarantine)
	if err := q4.Reload(e.ctx, 0x800); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []*replication.WALEvent{d, c} {
		if !q4.Quarantines(ev) || !hold(t, q4, ev) {
			t.Errorf("redelivered %s after the discard: published", ev.EventID)
		}
	}
	if got := e.status(t, "d"); got != StatusDiscarded {
		t.Errorf("d is %q, want %q", got, StatusDiscarded)
	}
}
