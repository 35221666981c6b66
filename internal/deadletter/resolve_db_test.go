package deadletter

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
)

// quarantined writes a poison event and two parked ones of order/9, and an
// unrelated quarantined aggregate, and returns the quarantine.
func quarantined(t *testing.T, e *dbEnv) *Queue {
	t.Helper()
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p", "order", "9", 0x500, 3))
	mustPoison(t, q, event("x", "order", "10", 0x400, 0))
	// Parked in arrival order, not commit order: a retry must follow
	// commit order.
	for _, ev := range []*replication.WALEvent{event("q2", "order", "9", 0x700, 0), event("q1", "order", "9", 0x600, 0)} {
		if !hold(t, q, ev) {
			t.Fatalf("%s not parked", ev.EventID)
		}
	}
	return q
}

// Retry re-publishes the aggregate's open rows in commit order, marks them
// published and lifts the quarantine; other aggregates stay quarantined.
func TestDBRetry(t *testing.T) {
	e := newDBEnv(t)
	quarantined(t, e)
	w := &recWriter{}
	res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); !slices.Equal(got, []string{"p", "q1", "q2"}) {
		t.Fatalf("published %v, want commit order p q1 q2", got)
	}
	if !res.Lifted || res.Failed() || res.Aggregate != (Aggregate{"order", "9"}) || len(res.Outcomes) != 3 {
		t.Fatalf("Result = %+v", res)
	}
	for _, o := range res.Outcomes {
		if o.Status != StatusPublished || o.Error != "" {
			t.Fatalf("outcome %+v", o)
		}
	}
	if w.got[0].AggregateVersion != "7" || string(w.got[0].Payload) != `{"id":"p"}` || w.got[0].Invalid != "" {
		t.Fatalf("re-published event %+v", w.got[0])
	}
	for _, id := range []string{"p", "q1", "q2"} {
		got, err := e.store.Get(e.ctx, id)
		if err != nil || got.Status != StatusPublished || got.ResolvedAt == nil || got.Resolution == nil || *got.Resolution != "retried" {
			t.Fatalf("%s after the retry: %+v, %v", id, got, err)
		}
	}
	if e.status(t, "x") != StatusDead {
		t.Fatal("a retry of one aggregate resolved another")
	}
	if _, err := e.store.FindAggregate(e.ctx, "9", ""); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("aggregate still quarantined after a retry: %v", err)
	}
	// Nothing open: a second retry publishes nothing.
	w2 := &recWriter{}
	if res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w2, caughtUp); err != nil || !res.Lifted || len(res.Outcomes) != 0 || len(w2.got) != 0 {
		t.Fatalf("second Retry = %+v, %v, published %v", res, err, w2.ids())
	}
}

// A retry stops at the first event that still fails: it and everything
// after it stay open, only it counts an attempt; a later retry resumes
// there without re-publishing what went through.
func TestDBRetryStopsAtFirstFailure(t *testing.T) {
	e := newDBEnv(t)
	quarantined(t, e)
	w := &recWriter{fail: map[string]error{"q1": errors.New("topic authorization failed")}}
	res, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lifted || !res.Failed() || !slices.Equal(w.ids(), []string{"p"}) {
		t.Fatalf("Result %+v, published %v", res, w.ids())
	}
	want := []Outcome{
		{EventID: "p", Status: StatusPublished},
		{EventID: "q1", Status: StatusParked, Error: "topic authorization failed"},
		{EventID: "q2", Status: StatusParked},
	}
	if !slices.Equal(res.Outcomes, want) {
		t.Fatalf("Outcomes = %+v, want %+v", res.Outcomes, want)
	}
	q1, err := e.store.Get(e.ctx, "q1")
	if err != nil || q1.Status != StatusParked || q1.Attempts != 2 || !strings.Contains(q1.Reason, "retry failed: topic authorization failed") ||
		!q1.LastFailedAt.After(q1.FirstFailedAt) {
		t.Fatalf("q1 after a failed retry: %+v, %v", q1, err)
	}
	if q2, err := e.store.Get(e.ctx, "q2"); err != nil || q2.Status != StatusParked || q2.Attempts != 1 {
		t.Fatalf("q2 (not reached): %+v, %v", q2, err)
	}
	// The quarantine now starts at q1.
	q := e.quarantine(t, poison.Quarantine)
	if hold(t, q, event("q0", "order", "9", 0x550, 0)) {
		t.Fatal("an event before the first open row was held")
	}
	w2 := &recWriter{}
	res, err = e.store.Retry(e.ctx, Aggregate{"order", "9"}, w2, caughtUp)
	if err != nil || !res.Lifted || !slices.Equal(w2.ids(), []string{"q1", "q2"}) {
		t.Fatalf("second Retry = %+v, %v, published %v", res, err, w2.ids())
	}
}

// Discard records the poison event as discarded with its reason, then
// re-publishes the rest of the aggregate.
func TestDBDiscard(t *testing.T) {
	e := newDBEnv(t)
	quarantined(t, e)
	w := &recWriter{}
	res, err := e.store.Discard(e.ctx, "p", "payload cannot be fixed", w, caughtUp)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Lifted || res.Aggregate != (Aggregate{"order", "9"}) || !slices.Equal(w.ids(), []string{"q1", "q2"}) {
		t.Fatalf("Discard = %+v, published %v", res, w.ids())
	}
	p, err := e.store.Get(e.ctx, "p")
	if err != nil || p.Status != StatusDiscarded || p.Resolution == nil || *p.Resolution != "discarded: payload cannot be fixed" || p.ResolvedAt == nil {
		t.Fatalf("discarded row %+v, %v", p, err)
	}
	if _, err := e.store.Discard(e.ctx, "p", "again", &recWriter{}, caughtUp); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("Discard of a discarded row = %v", err)
	}
	if _, err := e.store.Discard(e.ctx, "q1", "published already", &recWriter{}, caughtUp); err == nil || !strings.Contains(err.Error(), "published") {
		t.Fatalf("Discard of a published row = %v", err)
	}
	if _, err := e.store.Discard(e.ctx, "nope", "r", &recWriter{}, caughtUp); !errors.Is(err, ErrEntryNotFound) {
		t.Fatalf("Discard of an unknown row = %v, want ErrEntryNotFound", err)
	}
}

// A discard is kept even when the rest of the aggregate still fails.
func TestDBDiscardThenFailure(t *testing.T) {
	e := newDBEnv(t)
	quarantined(t, e)
	w := &recWriter{fail: map[string]error{"q2": errors.New("broker down")}}
	res, err := e.store.Discard(e.ctx, "p", "bad event", w, caughtUp)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lifted || !res.Failed() || !slices.Equal(w.ids(), []string{"q1"}) {
		t.Fatalf("Discard = %+v, published %v", res, w.ids())
	}
	for id, want := range map[string]string{"p": StatusDiscarded, "q1": StatusPublished, "q2": StatusParked} {
		if got := e.status(t, id); got != want {
			t.Errorf("%s is %q, want %q", id, got, want)
		}
	}
}

// A discard that waits for a retry of the same aggregate must not mark
// the event the retry just re-published as "discarded" (Kafka has the event, while the
// operators' record would say it was dropped): Discard re-checks the
// status under the lock and fails instead.
func TestDBDiscardWaitingForRetry(t *testing.T) {
	e := newDBEnv(t)
	quarantined(t, e)
	w := &gateWriter{started: make(chan struct{}), release: make(chan struct{})}
	started := w.started
	retried := make(chan error, 1)
	go func() {
		_, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp)
		retried <- err
	}()
	<-started
	discarded := make(chan error, 1)
	go func() {
		_, err := e.store.Discard(e.ctx, "p", "operator gave up", &recWriter{}, caughtUp)
		discarded <- err
	}()
	// Discard has read the row and waits for the lock.
	e.awaitLockWaiter(t, Aggregate{"order", "9"}, func() bool { return len(discarded) > 0 })
	close(w.release)
	if err := <-retried; err != nil {
		t.Fatal(err)
	}
	err := <-discarded
	if got := e.status(t, "p"); got != StatusPublished || err == nil {
		t.Fatalf("Discard after a concurrent retry = %v; row is %q, want it left published and an error", err, got)
	}
}

// TestDBCommitOrderAcrossLSNDigits: a retry, the list and the guard's
// earliest open event follow commit order where the positions' text does
// not (0/9000000 < 0/FFFFFF0 < 0/10000010): ordering by tx_lsn once meant
// the text output column of the same name, and a retry re-published an
// aggregate out of order once the WAL passed 0/10000000.
func TestDBCommitOrderAcrossLSNDigits(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p", "order", "9", 0x9000000, 0))
	for _, ev := range []*replication.WALEvent{event("q1", "order", "9", 0xFFFFFF0, 0), event("q2", "order", "9", 0x10000010, 0)} {
		if !hold(t, q, ev) {
			t.Fatalf("%s not parked", ev.EventID)
		}
	}
	entries, err := e.store.List(e.ctx, Filter{AggregateID: "9"})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, en := range entries {
		listed = append(listed, en.EventID)
	}
	if !slices.Equal(listed, []string{"p", "q1", "q2"}) {
		t.Errorf("dlq list order %v, want commit order p q1 q2", listed)
	}
	first, ok, err := e.store.earliestOpen(e.ctx, e.store.db, Aggregate{"order", "9"}, "")
	if err != nil || !ok || first.eventID != "p" {
		t.Errorf("earliest open event %q (%v, %v), want p", first.eventID, ok, err)
	}
	w := &recWriter{}
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, caughtUp); err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); !slices.Equal(got, []string{"p", "q1", "q2"}) {
		t.Fatalf("retry published %v, want commit order p q1 q2", got)
	}
}

// TestDBRestartKeepsQuarantineAcrossLSNDigits: a restarted relay loads
// each quarantined aggregate's earliest open position in commit order
// (0/9000000, not 0/10000010, whose text sorts first): a redelivered event
// between them is parked again, not published ahead of the poison event.
func TestDBRestartKeepsQuarantineAcrossLSNDigits(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p", "order", "9", 0x9000000, 0))
	if !hold(t, q, event("q2", "order", "9", 0x10000010, 0)) {
		t.Fatal("q2 not parked")
	}
	restarted := e.quarantine(t, poison.Quarantine)
	if !hold(t, restarted, event("q1", "order", "9", 0xFFFFFF0, 0)) {
		t.Fatal("after a restart, q1 (committed between the poison event and q2) was not parked")
	}
}
