package deadletter

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// relayAt is the env's relay position: the checkpoints of slot "s" (no
// such slot exists), as the dlq commands read them.
type relayAt struct {
	e   *dbEnv
	pos RelayPosition
	id  checkpoint.Identity
}

func newRelayAt(t *testing.T, e *dbEnv) *relayAt {
	t.Helper()
	r := &relayAt{e: e, pos: RelayPosition{DB: e.pool, Checkpoints: checkpoint.NewStore(e.pool, e.tbl, "s"),
		Slot: slot.NewManager(e.pool, slot.Config{Name: "no_such_slot_" + e.tbl.Schema}), SlotName: "s"}}
	var err error
	if r.id, err = r.pos.identity(e.ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// save saves a checkpoint at lsn on id (the server's when zero).
func (r *relayAt) save(t *testing.T, lsn pglogrepl.LSN, id checkpoint.Identity) {
	t.Helper()
	if id == (checkpoint.Identity{}) {
		id = r.id
	}
	if err := r.pos.Checkpoints.Save(r.e.ctx, checkpoint.Checkpoint{LSN: lsn, Identity: id}, 0); err != nil {
		t.Fatal(err)
	}
}

// The audit's scenario (issue 46): one Kafka transaction holds a1
// (published into it), a2 (poison, dead-lettered at once in PostgreSQL)
// and a3 (parked behind a2), all of one PostgreSQL transaction, and the
// Kafka transaction aborts. An operator's retry (or discard of a2) runs
// before the stream replays the range. Published then, a2 and a3 are
// visible at once, and the replay publishes a1 after them (a2 and a3 count
// as resolved): read_committed consumers read a2, a3, a1. The retry and
// the discard must wait until the relay's position passes the range.
func TestDBRetryWaitsForAbortedRange(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   func(e *dbEnv, w Writer, g Guard) (Result, error)
		want []string
	}{
		{"retry", func(e *dbEnv, w Writer, g Guard) (Result, error) {
			return e.store.Retry(e.ctx, Aggregate{"order", "9"}, w, g)
		}, []string{"a1", "a2", "a3"}},
		{"discard", func(e *dbEnv, w Writer, g Guard) (Result, error) {
			return e.store.Discard(e.ctx, "a2", "cannot be fixed", w, g)
		}, []string{"a1", "a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newDBEnv(t)
			r := newRelayAt(t, e)
			r.save(t, 0x400, checkpoint.Identity{}) // every range before this one is committed
			q := e.quarantine(t, poison.Quarantine)
			a1, a2, a3 := event("a1", "order", "9", 0x500, 0), event("a2", "order", "9", 0x500, 1), event("a3", "order", "9", 0x500, 2)

			// visible is what read_committed consumers read; txn is the
			// open Kafka transaction.
			var visible, txn []string
			stream := func() {
				for _, ev := range []*replication.WALEvent{a1, a2, a3} {
					if ev == a2 && !q.Quarantines(ev) {
						mustPoison(t, q, ev)
						continue
					}
					if !hold(t, q, ev) {
						txn = append(txn, ev.EventID)
					}
				}
			}
			stream()
			txn = nil // the Kafka transaction aborts: the position stays at 0x400

			w := &recWriter{}
			res, err := tc.op(e, w, Guard{Progress: r.pos})
			visible = append(visible, w.ids()...)
			var ahead *AheadError
			if !errors.As(err, &ahead) || !errors.Is(err, ErrAhead) {
				t.Errorf("%s before the replay: %+v, %v; want an *AheadError (published %v)", tc.name, res, err, w.ids())
			} else {
				if ahead.EventID != "a2" || ahead.Pos != a2.Pos() || ahead.Delivered.LSN != 0x400 || ahead.Delivered.From != "checkpoint" {
					t.Errorf("AheadError %+v", ahead)
				}
				for _, s := range []string{"order/9", "a2", "0/500", "0/400", "nothing published", "once the relay has caught up"} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("the refusal does not say %q: %v", s, err)
					}
				}
				if e.status(t, "a2") != StatusDead || e.status(t, "a3") != StatusParked {
					t.Errorf("a refused %s changed rows: a2 %s, a3 %s", tc.name, e.status(t, "a2"), e.status(t, "a3"))
				}
			}

			// The stream restarts behind the range and replays it; its
			// transaction commits and the position passes it.
			if err := q.Reload(e.ctx, 0x400); err != nil {
				t.Fatal(err)
			}
			stream()
			visible, txn = append(visible, txn...), nil
			r.save(t, 0x580, checkpoint.Identity{})

			if e.status(t, "a2") == StatusDead { // not done before the replay
				w = &recWriter{}
				if res, err = tc.op(e, w, Guard{Progress: r.pos}); err != nil || !res.Lifted {
					t.Fatalf("%s after the replay: %+v, %v", tc.name, res, err)
				}
				visible = append(visible, w.ids()...)
			}
			if !slices.Equal(visible, tc.want) {
				t.Fatalf("read_committed consumers read %v, want %v", visible, tc.want)
			}
		})
	}
}

// A retry waits, without the aggregate's lock, for the relay's position
// to pass its earliest open row, up to Guard.Wait; after that it refuses
// and says how long it waited.
func TestDBRetryWaitIsBounded(t *testing.T) {
	e := newDBEnv(t)
	r := newRelayAt(t, e)
	q := e.quarantine(t, poison.Quarantine)
	mustPoison(t, q, event("p", "order", "9", 0x500, 0))
	agg := Aggregate{"order", "9"}

	w := &recWriter{}
	waiting := make(chan *AheadError, 1)
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Retry(e.ctx, agg, w, Guard{Progress: r.pos, Wait: 20 * time.Second, Poll: 5 * time.Millisecond,
			OnWait: func(a *AheadError) { waiting <- a }})
		done <- err
	}()
	select {
	case a := <-waiting:
		if a.EventID != "p" || a.Delivered.From != "" || !strings.Contains(a.Error(), "none recorded") {
			t.Errorf("waits for %+v (%v)", a, a)
		}
	case err := <-done:
		t.Fatalf("Retry returned without waiting: %v", err)
	}
	// The relay holds no lock of ours: it can park meanwhile.
	if !hold(t, q, event("q", "order", "9", 0x600, 0)) {
		t.Fatal("q not parked")
	}
	if len(w.got) != 0 {
		t.Fatalf("published %v while waiting", w.ids())
	}
	r.save(t, 0x580, checkpoint.Identity{}) // passes p, not q: q is after p
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := w.ids(); !slices.Equal(got, []string{"p", "q"}) {
		t.Fatalf("published %v, want p q", got)
	}

	// Nothing passes it: the wait ends with the refusal.
	mustPoison(t, q, event("p2", "order", "9", 0x700, 0))
	start := time.Now()
	_, err := e.store.Retry(e.ctx, agg, w, Guard{Progress: r.pos, Wait: 50 * time.Millisecond, Poll: 5 * time.Millisecond})
	var ahead *AheadError
	if !errors.As(err, &ahead) || ahead.Waited < 50*time.Millisecond || !strings.Contains(err.Error(), "after waiting") {
		t.Fatalf("Retry after %s: %v; want an *AheadError after waiting 50ms", time.Since(start), err)
	}
}

// What a guard lets through at once: a discard that leaves nothing to
// publish (the poison event alone), an aggregate whose earliest row was
// written on another system (it precedes everything this one decodes),
// an aggregate with nothing open.
func TestDBGuardLetsThrough(t *testing.T) {
	e := newDBEnv(t)
	q := e.quarantine(t, poison.Quarantine)
	none := Guard{Progress: deliveredAt(0)}
	mustPoison(t, q, event("alone", "order", "1", 0x500, 0))
	if res, err := e.store.Discard(e.ctx, "alone", "bad row", &recWriter{}, none); err != nil || !res.Lifted {
		t.Errorf("discard of a poison event alone: %+v, %v", res, err)
	}
	mustPoison(t, q, event("foreign", "order", "F", 0x9000, 0))
	e.setSystem(t, "foreign", "6900000000000000001")
	q = e.quarantine(t, poison.Quarantine)
	if !hold(t, q, event("new-f", "order", "F", 0x100, 0)) {
		t.Fatal("new-f not parked")
	}
	w := &recWriter{}
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "F"}, w, none); err != nil || len(w.got) != 2 {
		t.Errorf("retry behind a foreign row: %v, published %v", err, w.ids())
	}
	if res, err := e.store.Retry(e.ctx, Aggregate{"order", "nothing"}, w, none); err != nil || !res.Lifted {
		t.Errorf("retry of nothing: %+v, %v", res, err)
	}
	// No Progress is needed while nothing is open, and is as soon as
	// something is.
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "1"}, w, Guard{}); err != nil {
		t.Errorf("retry of nothing without a Progress: %v", err)
	}
	mustPoison(t, q, event("p", "order", "1", 0x600, 0))
	if _, err := e.store.Retry(e.ctx, Aggregate{"order", "1"}, w, Guard{}); err == nil || !strings.Contains(err.Error(), "Guard.Progress") {
		t.Errorf("retry without a Progress: %v", err)
	}
}

// RelayPosition: the further of the checkpoint saved on this server's
// system and timeline and the slot's confirmed_flush_lsn, the slot read
// only when the checkpoint does not pass what is needed.
func TestDBRelayPosition(t *testing.T) {
	e := newDBEnv(t)
	r := newRelayAt(t, e)
	slotAt := &fakeSlot{}
	p := r.pos
	p.Slot = slotAt
	got := func(need pglogrepl.LSN) Delivered {
		t.Helper()
		d, err := p.Delivered(e.ctx, need)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	if d := got(0x500); d != (Delivered{}) || !strings.Contains(d.String(), "none recorded") {
		t.Errorf("nothing saved, no slot: %+v", d)
	}
	other := r.id
	other.Timeline++
	r.save(t, 0x900, other)
	if d := got(0x500); d.LSN != 0 {
		t.Errorf("a checkpoint of another timeline counted: %+v", d)
	}
	r.save(t, 0x600, checkpoint.Identity{})
	slotAt.st, slotAt.reads = slot.Status{ConfirmedFlushLSN: 0x700}, 0
	if d := got(0x500); d != (Delivered{LSN: 0x600, From: "checkpoint"}) || slotAt.reads != 0 {
		t.Errorf("checkpoint past the need: %+v, %d slot reads", d, slotAt.reads)
	}
	if d := got(0x650); d.LSN != 0x700 || !strings.Contains(d.From, `slot "s"`) || slotAt.reads != 1 {
		t.Errorf("slot further: %+v", d)
	}
	slotAt.st = slot.Status{ConfirmedFlushLSN: 0x580}
	if d := got(0x650); d.LSN != 0x600 {
		t.Errorf("slot behind the checkpoint: %+v", d)
	}
	slotAt.err = errors.New("standby unreachable")
	if _, err := p.Delivered(e.ctx, 0x650); err == nil {
		t.Error("a slot read error was dropped")
	}
	p.Slot = nil
	if d := got(0x650); d.LSN != 0x600 {
		t.Errorf("no slot: %+v", d)
	}
}

type fakeSlot struct {
	st    slot.Status
	err   error
	reads int
}

func (f *fakeSlot) Status(context.Context) (slot.Status, error) {
	f.reads++
	return f.st, f.err
}
