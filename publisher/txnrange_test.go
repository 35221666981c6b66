package publisher

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outbox-relay/outbox-relay/replication"
)

// TestTransactionCommitsAroundHeldEvent: an event of a quarantined
// aggregate waits in Hold (an operator's dlq retry holds the aggregate's
// lock) for twice the transaction timeout. The events before it commit
// at once, under a position naming the last of them; the events after it
// are not sent while it waits (no position could cover them without it),
// so no transaction stays open into the coordinator's timeout, and
// nothing is aborted or reported fenced. Once the lock is released the
// held event and those after it commit, each once, in order per
// aggregate.
func TestTransactionCommitsAroundHeldEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		b := newTxnBroker()
		b.timeout = timeout
		q := &lockedQuarantine{release: make(chan struct{})}
		var mu sync.Mutex
		var positions []string
		p := startTxnPublisherWith(t, b, config{DeadLetters: q, Transactions: &TransactionConfig{
			Interval: time.Millisecond, Timeout: timeout,
			Position: func(last *replication.WALEvent, _ int) []byte {
				mu.Lock()
				defer mu.Unlock()
				positions = append(positions, last.EventID)
				return []byte(last.EventID)
			},
		}})
		var acks ackLog
		for _, e := range [][2]string{{"agg-1", "a1"}, {"agg-2", "b1"}, {"x", "x1"}, {"agg-1", "a2"}, {"agg-2", "b2"}} {
			if err := p.Publish(context.Background(), testEvent("orders", e[0], e[1]), acks.acker(e[1])); err != nil {
				t.Fatal(err)
			}
		}
		committed := func(ids ...string) bool {
			visible, _ := b.state()
			for _, id := range ids {
				if !slices.ContainsFunc(visible, func(r string) bool { return strings.HasSuffix(r, "/"+id) }) {
					return false
				}
			}
			return true
		}
		if !within(timeout/2, func() bool { return committed("a1", "b1") && acks.n.Load() == 2 }) {
			visible, pending := b.state()
			t.Fatalf("while x1 waits in Hold: visible %v, pending %v, acknowledged %v; want a1 and b1 committed and acknowledged within half the transaction timeout",
				visible, pending, acks.order())
		}
		mu.Lock()
		first := slices.Clone(positions)
		mu.Unlock()
		if !slices.Equal(first, []string{"b1"}) {
			t.Fatalf("positions %v, want [b1]: the last event before the held one", first)
		}
		time.Sleep(2 * timeout) // virtual: x1 still waits
		select {
		case err := <-p.Fatal():
			t.Fatalf("publisher failed while an event waited in Hold: %v", err)
		default:
		}
		b.mu.Lock()
		ops, pending := slices.Clone(b.ops), slices.Clone(b.pending)
		b.mu.Unlock()
		if slices.Contains(ops, "timeout") || len(pending) != 0 {
			t.Fatalf("requests %v, open transaction %v: want nothing sent after the held event while it waits, and no timeout", ops, pending)
		}
		if n := acks.n.Load(); n != 2 {
			t.Fatalf("%d events acknowledged while x1 waits (%v), want a1 and b1", n, acks.order())
		}

		close(q.release)
		acks.waitFor(t, 5, 5*time.Second)
		visible, _ := b.state()
		for _, id := range []string{"a1", "b1", "x1", "a2", "b2"} {
			if n := len(slices.DeleteFunc(slices.Clone(visible), func(r string) bool { return !strings.HasSuffix(r, "/"+id) })); n != 1 {
				t.Fatalf("%s committed %d times (%v), want once", id, n, visible)
			}
		}
		mu.Lock()
		last := positions[len(positions)-1]
		mu.Unlock()
		if last != "b2" {
			t.Fatalf("last position %s, want b2", last)
		}
		order := acks.order()
		for _, pair := range [][2]string{{"a1", "a2"}, {"b1", "b2"}} {
			if slices.Index(order, pair[0]) > slices.Index(order, pair[1]) {
				t.Fatalf("acknowledged %v: %s after %s", order, pair[0], pair[1])
			}
		}
	})
}

// slowQuarantine quarantines the aggregates whose id begins with "q".
// Hold takes hold(ev) of (virtual) time, then parks the event when park
// says so and lets it be published otherwise. Asked again about an event
// it let through (a lane's check before sending), it answers at once, as
// the relay's does once it has found the quarantine lifted.
type slowQuarantine struct {
	hold    func(ev *replication.WALEvent) time.Duration
	park    func(ev *replication.WALEvent) bool
	mu      sync.Mutex
	decided map[string]bool
}

func (q *slowQuarantine) Quarantines(ev *replication.WALEvent) bool {
	return strings.HasPrefix(ev.AggregateID, "q")
}

func (q *slowQuarantine) Hold(ctx context.Context, ev *replication.WALEvent, _ string) (bool, error) {
	q.mu.Lock()
	again := q.decided[ev.EventID]
	q.decided[ev.EventID] = true
	q.mu.Unlock()
	if !q.Quarantines(ev) || again {
		return false, nil
	}
	select {
	case <-time.After(q.hold(ev)):
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return q.park(ev), nil
}

func (q *slowQuarantine) Poison(context.Context, *replication.WALEvent, string, string, string) error {
	return nil
}

// TestTransactionPositionsCoverExactlyTheirRecords: under a stream that
// interleaves quarantined aggregates (some of their events parked, some
// published, a few waiting longer than the transaction timeout) with
// other aggregates, every committed transaction holds exactly the
// published events after the previous position and up to its own, each
// event is committed once (parked ones never), in order per aggregate,
// and no transaction outlives the coordinator's timeout.
func TestTransactionPositionsCoverExactlyTheirRecords(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout, n = time.Second, 300
		index := func(id string) int {
			var i int
			fmt.Sscanf(id, "e-%d", &i)
			return i
		}
		q := &slowQuarantine{
			decided: map[string]bool{},
			hold: func(ev *replication.WALEvent) time.Duration {
				switch i := index(ev.EventID); {
				case i%100 == 0:
					return 3 * timeout
				case i%7 == 0:
					return 20 * time.Millisecond
				}
				return time.Millisecond
			},
			park: func(ev *replication.WALEvent) bool { return index(ev.EventID)%3 == 0 },
		}
		b := newTxnBroker()
		b.timeout = timeout
		var mu sync.Mutex
		var positions []int    // per commit, the position's event
		var commits [][]string // per commit, its event records
		p := startTxnPublisherWith(t, b, config{DeadLetters: q, Transactions: &TransactionConfig{
			Interval: time.Millisecond, Timeout: timeout,
			Position: func(last *replication.WALEvent, _ int) []byte {
				b.mu.Lock()
				recs := slices.Clone(b.pending)
				b.mu.Unlock()
				mu.Lock()
				defer mu.Unlock()
				positions = append(positions, index(last.EventID))
				commits = append(commits, recs)
				return []byte(last.EventID)
			},
		}})
		var acks ackLog
		aggregate := func(i int) string {
			if i%4 == 0 {
				return fmt.Sprintf("q-%d", i%3)
			}
			return fmt.Sprintf("a-%d", i%10)
		}
		published := map[string]bool{}
		for i := range n {
			id := fmt.Sprintf("e-%04d", i)
			ev := testEvent("orders", aggregate(i), id)
			if !(q.Quarantines(ev) && q.park(ev)) {
				published[id] = true
			}
			if err := p.Publish(context.Background(), ev, acks.acker(id)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Microsecond)
		}
		acks.waitFor(t, n, time.Minute)
		select {
		case err := <-p.Fatal():
			t.Fatalf("publisher failed: %v", err)
		default:
		}
		b.mu.Lock()
		timedOut := slices.Contains(b.ops, "timeout")
		b.mu.Unlock()
		if timedOut {
			t.Fatal("a transaction outlived the coordinator's timeout")
		}
		mu.Lock()
		defer mu.Unlock()
		seen := map[string]bool{}
		lastOf := map[string]int{}
		prev := -1
		for k, recs := range commits {
			pos := positions[k]
			if pos <= prev {
				t.Fatalf("commit %d: position %d after %d", k, pos, prev)
			}
			for _, r := range recs {
				parts := strings.Split(r, "/") // topic/key/event_id
				id, agg := parts[2], parts[1]
				i := index(id)
				if i <= prev || i > pos {
					t.Fatalf("commit %d (positions %d..%d] holds %s", k, prev, pos, id)
				}
				if seen[id] || !published[id] {
					t.Fatalf("%s committed again or though parked", id)
				}
				seen[id] = true
				if last, ok := lastOf[agg]; ok && last > i {
					t.Fatalf("aggregate %s: %s committed after e-%04d", agg, id, last)
				}
				lastOf[agg] = i
			}
			prev = pos
		}
		if len(seen) != len(published) || prev != n-1 {
			t.Fatalf("%d of %d published events committed, last position %d", len(seen), len(published), prev)
		}
	})
}
