package deadletter

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Under poison.Halt a poison event stops the relay: nothing is written (the
// database is never touched) and the aggregate is not quarantined.
func TestPoisonUnderHaltWritesNothing(t *testing.T) {
	q := &Queue{store: NewStore(noDB{t}, testTable), policy: poison.Halt, log: testLogger(t), open: map[Aggregate]replication.Position{}}
	dead := 0
	q.OnDead = func() { dead++ }
	err := q.Poison(context.Background(), event("e-1", "order", "9", 0x100, 0), "orders", "permanent", "too large")
	var he *poison.HaltError
	if !errors.As(err, &he) {
		t.Fatalf("Poison under halt = %v, want a *poison.HaltError", err)
	}
	if he.EventID != "e-1" || he.AggregateID != "9" || he.Reason != "too large" || he.Held != "the slot position" || !poison.IsPermanent(err) {
		t.Fatalf("HaltError = %+v", he)
	}
	if q.Quarantined() != 0 || dead != 0 {
		t.Fatalf("halt quarantined %d aggregates, OnDead called %d times", q.Quarantined(), dead)
	}
}

// Hold decides from memory, without the database, for every event that is
// not after its aggregate's open position.
func TestHoldDecidedInMemory(t *testing.T) {
	at := replication.Position{TxLSN: 0x500, Ordinal: 3}
	q := &Queue{store: NewStore(noDB{t}, testTable), policy: poison.Quarantine, log: testLogger(t),
		open: map[Aggregate]replication.Position{{"order", "9"}: at}}
	q.OnPark = func() { t.Error("OnPark called for an event that was not parked") }
	ctx := context.Background()
	cases := []struct {
		name string
		ev   *replication.WALEvent
		want bool
	}{
		{"another aggregate", event("a", "order", "10", 0x600, 0), false},
		{"same id, another type", event("b", "invoice", "9", 0x600, 0), false},
		{"earlier transaction", event("c", "order", "9", 0x400, 9), false},
		{"earlier in the poison's transaction", event("d", "order", "9", 0x500, 2), false},
		{"the poison event redelivered", event("e", "order", "9", 0x500, 3), true},
	}
	for _, c := range cases {
		held, err := q.Hold(ctx, c.ev, "orders")
		if err != nil || held != c.want {
			t.Errorf("%s: Hold = %v, %v; want %v", c.name, held, err, c.want)
		}
	}
	if !q.Quarantines(event("x", "order", "9", 1, 0)) || q.Quarantines(event("y", "invoice", "9", 1, 0)) {
		t.Error("Quarantines must match the aggregate type and id")
	}
}

// An event after the open position needs the database; its failures reach
// the caller, which must then not acknowledge the event.
func TestHoldDatabaseErrorIsReturned(t *testing.T) {
	boom := errors.New("connection reset")
	q := &Queue{store: NewStore(errDB{boom}, testTable), policy: poison.Quarantine, log: testLogger(t),
		open: map[Aggregate]replication.Position{{"order", "9"}: {TxLSN: 0x500}}}
	held, err := q.Hold(context.Background(), event("late", "order", "9", 0x600, 0), "orders")
	if held || !errors.Is(err, boom) {
		t.Fatalf("Hold = %v, %v; want false and %v", held, err, boom)
	}
	if q.Quarantined() != 1 {
		t.Fatal("a failed Hold must keep the aggregate quarantined")
	}
	if err := q.Poison(context.Background(), event("p", "order", "1", 0x600, 0), "orders", "permanent", "x"); !errors.Is(err, boom) {
		t.Fatalf("Poison = %v, want %v", err, boom)
	}
	if q.Quarantines(event("p", "order", "1", 0x600, 0)) {
		t.Fatal("a poison event that was not written must not quarantine its aggregate")
	}
}

func TestNewQuarantineReadError(t *testing.T) {
	boom := errors.New("relation does not exist")
	if _, err := NewQueue(context.Background(), NewStore(errDB{boom}, testTable), poison.Quarantine, testLogger(t)); !errors.Is(err, boom) {
		t.Fatalf("NewQueue = %v, want %v", err, boom)
	}
}

func TestResultFailed(t *testing.T) {
	ok := Result{Outcomes: []Outcome{{EventID: "a", Status: StatusPublished}, {EventID: "b", Status: StatusPublished}}}
	if ok.Failed() || (Result{}).Failed() {
		t.Fatal("Failed without an error")
	}
	bad := Result{Outcomes: []Outcome{{EventID: "a", Status: StatusPublished}, {EventID: "b", Status: StatusDead, Error: "too large"},
		{EventID: "c", Status: StatusParked}}}
	if !bad.Failed() {
		t.Fatal("Failed missed an error")
	}
}

func TestDiscardNeedsReason(t *testing.T) {
	s := NewStore(noDB{t}, testTable)
	if _, err := s.Discard(context.Background(), "e-1", "", &recWriter{}, caughtUp); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("Discard without a reason = %v", err)
	}
}

func TestEventKey(t *testing.T) {
	if k := eventKey(event("e-1", "order", "9", 0x16B3748, 4)); k != "e-1" {
		t.Fatalf("eventKey = %q", k)
	}
	ev := event("", "order", "9", 0x16B3748, 4)
	if k := eventKey(ev); k != "position:0/16B3748:4" {
		t.Fatalf("eventKey without an id = %q", k)
	}
	ev.Ordinal = 5
	if eventKey(ev) == "position:0/16B3748:4" {
		t.Fatal("two events of one transaction without ids share a key")
	}
}

// Entry.event rebuilds what a retry publishes; an entry missing a column
// the record needs becomes an Invalid event (the writer dead-letters it
// again) instead of one with made-up values.
func TestEntryEvent(t *testing.T) {
	v, sv, h := int64(42), int32(3), `{"k":"v"}`
	e := Entry{EventID: "e-1", Aggregate: Aggregate{"order", "9"}, AggregateVersion: &v, EventType: "created",
		SchemaVersion: &sv, Payload: []byte(`{}`), Headers: &h, Pos: replication.Position{TxLSN: 0x900, Ordinal: 2}}
	ev := e.event()
	if ev.EventID != "e-1" || ev.AggregateType != "order" || ev.AggregateID != "9" || ev.AggregateVersion != "42" ||
		ev.SchemaVersion != "3" || ev.EventType != "created" || string(ev.Payload) != "{}" || string(ev.Headers) != h ||
		ev.Pos() != e.Pos || ev.Invalid != "" {
		t.Fatalf("event() = %+v", ev)
	}
	noHeaders := e
	noHeaders.Headers = nil
	if ev := noHeaders.event(); ev.Headers != nil || ev.Invalid != "" {
		t.Fatalf("NULL headers: %+v", ev)
	}
	cases := []struct {
		change func(*Entry)
		want   string
	}{
		{func(e *Entry) { e.AggregateVersion = nil }, `column "aggregate_version" is NULL`},
		{func(e *Entry) { e.SchemaVersion = nil }, `column "schema_version" is NULL`},
		{func(e *Entry) { e.EventType = "" }, `column "event_type" is empty`},
		{func(e *Entry) { e.Payload = nil }, `column "payload" is NULL`},
		// The first missing column is reported.
		{func(e *Entry) { e.Payload, e.AggregateVersion = nil, nil }, `column "aggregate_version" is NULL`},
	}
	for _, c := range cases {
		bad := e
		c.change(&bad)
		if got := bad.event().Invalid; got != c.want {
			t.Errorf("Invalid = %q, want %q", got, c.want)
		}
	}
}

func TestStoreErrorsAreWrapped(t *testing.T) {
	boom := errors.New("boom")
	s := NewStore(errDB{boom}, testTable)
	ctx := context.Background()
	if err := s.Check(ctx); !errors.Is(err, boom) || !strings.Contains(err.Error(), "dead-letter table") {
		t.Errorf("Check = %v", err)
	}
	if _, err := s.List(ctx, Filter{}); !errors.Is(err, boom) {
		t.Errorf("List = %v", err)
	}
	if _, err := s.Get(ctx, "e"); !errors.Is(err, boom) || errors.Is(err, ErrEntryNotFound) {
		t.Errorf("Get = %v", err)
	}
	if _, err := s.FindAggregate(ctx, "9", ""); !errors.Is(err, boom) {
		t.Errorf("FindAggregate = %v", err)
	}
	if _, err := s.Retry(ctx, Aggregate{"order", "9"}, &recWriter{}, caughtUp); !errors.Is(err, boom) {
		t.Errorf("Retry = %v", err)
	}
}
