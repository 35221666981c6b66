package checkpoint

import (
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestFlushWaitsForEveryEarlierTransaction(t *testing.T) {
	tr := New(100, Limits{})
	a := tr.begin(time.Time{})
	tr.track(a, 10)
	tr.Commit(a, 200)
	b := tr.begin(time.Time{})
	tr.track(b, 10)
	tr.track(b, 10)
	tr.Commit(b, 300)

	b.ack(10)
	b.ack(10)
	if got := tr.Flushed(); got != 100 {
		t.Fatalf("flushed %s after acking only the later transaction, want 0/64", got)
	}
	a.ack(10)
	if got := tr.Flushed(); got != 300 {
		t.Fatalf("flushed %s, want %s", got, pglogrepl.LSN(300))
	}
	if !tr.Idle() {
		t.Fatal("tracker not idle after all acks")
	}
}

func TestOpenTransactionHoldsFlush(t *testing.T) {
	tr := New(0, Limits{})
	a := tr.begin(time.Time{})
	tr.track(a, 1)
	a.ack(1)
	if tr.Flushed() != 0 || tr.Idle() {
		t.Fatal("an uncommitted transaction must hold the flush position")
	}
	if tr.AdvanceIdle(500) {
		t.Fatal("AdvanceIdle moved while a transaction is open")
	}
	tr.Commit(a, 50)
	if tr.Flushed() != 50 {
		t.Fatalf("flushed %s, want 0/32", tr.Flushed())
	}
	if !tr.AdvanceIdle(500) || tr.Flushed() != 500 {
		t.Fatal("AdvanceIdle did not move an idle tracker")
	}
	if tr.AdvanceIdle(400) || tr.Flushed() != 500 {
		t.Fatal("flush position moved backwards")
	}
}

func TestEmptyTransactionsFold(t *testing.T) {
	tr := New(0, Limits{})
	slow := tr.begin(time.Time{})
	tr.track(slow, 1)
	tr.Commit(slow, 10)
	for i := 0; i < 10000; i++ {
		tx := tr.begin(time.Time{})
		tr.Commit(tx, pglogrepl.LSN(20+i))
	}
	if n := tr.Stats().Transactions; n != 1 {
		t.Fatalf("%d live transactions, want 1 (empty ones fold)", n)
	}
	slow.ack(1)
	if got := tr.Flushed(); got != pglogrepl.LSN(20+9999) {
		t.Fatalf("flushed %s", got)
	}
}

func TestWindowFullAndSpace(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 2, MaxBytes: 1 << 20})
	tx := tr.begin(time.Time{})
	tr.track(tx, 1)
	tr.track(tx, 1)
	if !tr.Full() {
		t.Fatal("window should be full")
	}
	tx.ack(1)
	select {
	case <-tr.Space():
	default:
		t.Fatal("no space signal after an ack")
	}
	if tr.Full() {
		t.Fatal("window still full")
	}
}

// TestRandomAckOrder checks the invariant against a model: the flushed LSN is
// always the end of the longest fully acknowledged committed prefix.
func TestRandomAckOrder(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 50; round++ {
		tr := New(0, Limits{})
		type ev struct {
			tx  *Txn
			idx int
		}
		var evs []ev
		ends := []pglogrepl.LSN{}
		counts := []int{}
		for i := 0; i < 30; i++ {
			tx := tr.begin(time.Time{})
			n := rng.Intn(4)
			for j := 0; j < n; j++ {
				tr.track(tx, 1)
				evs = append(evs, ev{tx, i})
			}
			end := pglogrepl.LSN((i + 1) * 10)
			tr.Commit(tx, end)
			ends = append(ends, end)
			counts = append(counts, n)
		}
		rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
		var mu sync.Mutex
		remaining := append([]int(nil), counts...)
		for _, e := range evs {
			e.tx.ack(1)
			mu.Lock()
			remaining[e.idx]--
			want := pglogrepl.LSN(0)
			for i := range remaining {
				if remaining[i] > 0 {
					break
				}
				want = ends[i]
			}
			mu.Unlock()
			if got := tr.Flushed(); got != want {
				t.Fatalf("round %d: flushed %s, model %s", round, got, want)
			}
		}
	}
}

func TestConcurrentAcks(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 1 << 30})
	var txs []*Txn
	for i := 0; i < 100; i++ {
		tx := tr.begin(time.Time{})
		for j := 0; j < 100; j++ {
			tr.track(tx, 1)
		}
		tr.Commit(tx, pglogrepl.LSN(i+1))
		txs = append(txs, tx)
	}
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < len(txs); i += 8 {
				for j := 0; j < 100; j++ {
					txs[i].ack(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if tr.Flushed() != 100 || !tr.Idle() {
		t.Fatalf("flushed %s idle %v", tr.Flushed(), tr.Idle())
	}
}
