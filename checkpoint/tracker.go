package checkpoint

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// Limits bound the in-flight window.
type Limits struct {
	// MaxEvents is the most unacknowledged events held at once.
	MaxEvents int
	// MaxBytes is the most unacknowledged payload bytes held at once.
	MaxBytes int64
}

// Tracker turns out-of-order acknowledgements into a monotonic flush LSN.
// All methods are safe for concurrent use: the replication stream calls
// Begin/Track/Commit, publisher goroutines call Txn.Ack.
type Tracker struct {
	limits Limits

	mu       sync.Mutex
	txs      []*Txn // WAL order; txs[head:] are live
	head     int
	flushed  pglogrepl.LSN
	events   int
	bytes    int64
	space    chan struct{}
	onFlush  func(lsn pglogrepl.LSN)
	released int // acknowledged events, for metrics and tests
	last     Acked
}

// Acked describes the flushed position: LSN, and the commit time and xid
// of the last fully acknowledged transaction (zero when the position moved
// by keepalives only). It is what the relay saves as its checkpoint.
type Acked struct {
	LSN        pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
}

// Txn is one source transaction as seen by the tracker. Events of a
// transaction are acknowledged through it.
type Txn struct {
	t          *Tracker
	CommitTime time.Time
	endLSN     pglogrepl.LSN
	xid        uint32
	pending    int
	committed  bool
}

// New returns a Tracker whose flushed position starts at start, the LSN
// the stream resumes from (everything before it is already confirmed).
func New(start pglogrepl.LSN, limits Limits) *Tracker {
	if limits.MaxEvents <= 0 {
		limits.MaxEvents = 10000
	}
	if limits.MaxBytes <= 0 {
		limits.MaxBytes = 16 << 20
	}
	return &Tracker{limits: limits, flushed: start, space: make(chan struct{}, 1)}
}

// OnFlush registers f to be called (under the tracker's lock, so keep it
// cheap) whenever the flushed position advances.
func (t *Tracker) OnFlush(f func(lsn pglogrepl.LSN)) {
	t.mu.Lock()
	t.onFlush = f
	t.mu.Unlock()
}

// Begin records the start of a transaction. Transactions must be begun in
// WAL order, which is the order the walsender sends them.
func (t *Tracker) Begin(commitTime time.Time) *Txn {
	return t.BeginXid(commitTime, 0)
}

// BeginXid is Begin for a transaction whose xid is known (from pgoutput's
// Begin message), so Last can report it.
func (t *Tracker) BeginXid(commitTime time.Time, xid uint32) *Txn {
	tx := &Txn{t: t, CommitTime: commitTime, xid: xid}
	t.mu.Lock()
	t.txs = append(t.txs, tx)
	t.mu.Unlock()
	return tx
}

// Track adds one event of size bytes to tx's pending count and to the window.
func (t *Tracker) Track(tx *Txn, bytes int) {
	t.mu.Lock()
	tx.pending++
	t.events++
	t.bytes += int64(bytes)
	t.mu.Unlock()
}

// Commit marks tx complete at endLSN (the CommitMessage's TransactionEndLSN):
// once all its events are acknowledged the flush position may reach endLSN.
func (t *Tracker) Commit(tx *Txn, endLSN pglogrepl.LSN) {
	t.mu.Lock()
	tx.endLSN = endLSN
	tx.committed = true
	// A transaction without pending events behind a committed one folds
	// into it, so a stream of event-less transactions behind a slow one
	// cannot grow the list without bound.
	if n := len(t.txs); tx.pending == 0 && n-t.head >= 2 && t.txs[n-1] == tx && t.txs[n-2].committed {
		t.txs[n-2].endLSN = endLSN
		t.txs[n-1] = nil
		t.txs = t.txs[:n-1]
	}
	t.advanceLocked()
	t.mu.Unlock()
}

// Ack acknowledges one event of size bytes of tx.
func (tx *Txn) Ack(bytes int) {
	t := tx.t
	t.mu.Lock()
	tx.pending--
	t.events--
	t.bytes -= int64(bytes)
	t.released++
	if tx.pending == 0 {
		t.advanceLocked()
	}
	room := t.events < t.limits.MaxEvents && t.bytes < t.limits.MaxBytes
	t.mu.Unlock()
	if room {
		select {
		case t.space <- struct{}{}:
		default:
		}
	}
}

// advanceLocked pops fully acknowledged committed transactions from the head.
func (t *Tracker) advanceLocked() {
	moved := false
	for t.head < len(t.txs) {
		tx := t.txs[t.head]
		if !tx.committed || tx.pending > 0 {
			break
		}
		if tx.endLSN > t.flushed {
			t.flushed = tx.endLSN
			moved = true
		}
		t.last.CommitTime, t.last.Xid = tx.CommitTime, tx.xid
		t.txs[t.head] = nil
		t.head++
	}
	// Reclaim the popped prefix once it dominates the slice, so the slice
	// stays proportional to the live transactions.
	if t.head > 64 && t.head*2 >= len(t.txs) {
		n := copy(t.txs, t.txs[t.head:])
		clear(t.txs[n:])
		t.txs = t.txs[:n]
		t.head = 0
	}
	if moved && t.onFlush != nil {
		t.onFlush(t.flushed)
	}
}

// Flushed is the LSN up to which everything is acknowledged by Kafka: the
// value to send as flush position in standby status updates.
func (t *Tracker) Flushed() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flushed
}

// AdvanceIdle moves the flushed position to lsn if nothing is in flight and
// lsn is ahead. The stream calls it with a keepalive's or heartbeat's WAL
// position, which is safe only when no transaction is open or pending: all
// WAL before that position was then already sent and acknowledged. It
// reports whether the position moved.
func (t *Tracker) AdvanceIdle(lsn pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != len(t.txs) || lsn <= t.flushed {
		return false
	}
	t.flushed = lsn
	if t.onFlush != nil {
		t.onFlush(lsn)
	}
	return true
}

// Last returns the flushed position with the last acknowledged
// transaction's commit time and xid.
func (t *Tracker) Last() Acked {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.last
	a.LSN = t.flushed
	return a
}

// Idle reports whether no transaction is open or waiting for acknowledgements.
func (t *Tracker) Idle() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.head == len(t.txs)
}

// Full reports whether the in-flight window is exhausted; the stream must
// wait on Space before reading more.
func (t *Tracker) Full() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events >= t.limits.MaxEvents || t.bytes >= t.limits.MaxBytes
}

// Space is signalled when acknowledgements make room in a full window.
func (t *Tracker) Space() <-chan struct{} { return t.space }

// Stats is a snapshot of the window, for metrics and shutdown.
type Stats struct {
	Events       int
	Bytes        int64
	Transactions int
	Acked        int
	// OldestCommit is the commit time of the oldest transaction with
	// unacknowledged events; zero when none.
	OldestCommit time.Time
}

// Stats returns a snapshot of the window.
func (t *Tracker) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Stats{Events: t.events, Bytes: t.bytes, Transactions: len(t.txs) - t.head, Acked: t.released}
	if t.head < len(t.txs) {
		s.OldestCommit = t.txs[t.head].CommitTime
	}
	return s
}
