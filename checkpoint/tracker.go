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
// BeginTx/TrackOrdinal/Commit, publisher goroutines call Txn.AckSeq.
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

	// seq is the next event's sequence number; ring knows which are
	// acknowledged (see Partial).
	seq  uint64
	ring ackRing
	// kick, once NotifyAcks set it, is signalled every kickStep
	// acknowledgements of the head transaction that no save covers;
	// kickTx and kickDone remember the head and its acknowledgement count
	// at the last signal. A non-nil kick also turns on the hold (see
	// heldLocked).
	kick     chan struct{}
	kickStep int
	kickTx   *Txn
	kickDone int
}

// SaveToken names what a Last snapshot knew of the head transaction; the
// saver hands it back to Saved once it saved that snapshot, or to
// SaveFailed when it could not.
type SaveToken struct {
	tx *Txn
	// acks is tx's acknowledgements at the snapshot; expressed is how
	// many of them the snapshot's Partial contains.
	acks, expressed int
}

// Acked describes the flushed position: LSN, and the commit time and xid
// of the last fully acknowledged transaction (zero when the position moved
// by keepalives only). It is what the relay saves as its checkpoint.
type Acked struct {
	LSN        pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
	// Partial is the acknowledged prefix of the oldest transaction after
	// LSN (zero when none is known): a crash inside a large transaction
	// then re-sends only what follows it.
	Partial Partial
	// Decoded is the highest TransactionEndLSN whose events were handed to
	// the publisher (0: unknown). The Tracker does not know it; the relay
	// fills it in before a Saver saves it as Checkpoint.Decoded.
	Decoded pglogrepl.LSN
	// Token is for Saved.
	Token SaveToken
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

	// finalLSN is the commit LSN from Begin (0: unknown, no Partial).
	finalLSN pglogrepl.LSN
	// The tracked events have sequence numbers firstSeq..firstSeq+tracked-1;
	// the first span of them have the consecutive ordinals
	// firstOrdinal..firstOrdinal+span-1 (gap: a later one did not follow).
	firstSeq     uint64
	tracked      int
	firstOrdinal int
	span         int
	gap          bool

	// acked counts this run's acknowledgements (AckSeq) of events within
	// span, the ones a Partial can express; saved is how many of them a
	// saved checkpoint contains (Saved), or a failed save stopped holding
	// (SaveFailed). settled counts the events within span that Settle
	// recorded in the ring: a Partial contains them, but they are not
	// this run's acknowledgements.
	acked, saved, settled int
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
	return &Tracker{limits: limits, flushed: start, space: make(chan struct{}, 1), ring: newAckRing(limits.MaxEvents)}
}

// OnFlush registers f to be called (under the tracker's lock, so keep it
// cheap) whenever the flushed position advances.
func (t *Tracker) OnFlush(f func(lsn pglogrepl.LSN)) {
	t.mu.Lock()
	t.onFlush = f
	t.mu.Unlock()
}

// BeginTx records the start of a transaction: its commit time and xid
// (from pgoutput's Begin message), so Last can report them, and its commit
// LSN (Begin's final LSN; 0: unknown), so its acknowledged prefix can be
// reported as a Partial while it is the oldest unconfirmed transaction.
// Transactions must be begun in WAL order, which is the order the
// walsender sends them.
func (t *Tracker) BeginTx(commitTime time.Time, xid uint32, finalLSN pglogrepl.LSN) *Txn {
	tx := &Txn{t: t, CommitTime: commitTime, xid: xid, finalLSN: finalLSN}
	t.mu.Lock()
	t.txs = append(t.txs, tx)
	t.mu.Unlock()
	return tx
}

// TrackOrdinal adds one event of size bytes to tx's pending count and to
// the window, at ordinal (0-based index within its transaction; -1: the
// one after tx's previous tracked event, 0 for the first). It returns the
// event's sequence number for Txn.AckSeq. The stream
// tracks (or settles) a transaction's events in ordinal order; ordinals
// before the first tracked one must be settled already, as they count into
// the transaction's acknowledged prefix. A restart inside a transaction
// calls Settle for the events a saved Partial names, so its own
// acknowledgements extend that prefix instead of starting a new one.
func (t *Tracker) TrackOrdinal(tx *Txn, ordinal int, bytes int) Seq {
	t.mu.Lock()
	s := t.numberLocked(tx, ordinal)
	tx.pending++
	t.events++
	t.bytes += int64(bytes)
	t.mu.Unlock()
	return Seq(s)
}

// Settle records the event at ordinal of tx as acknowledged by an earlier
// run: a restart skips it because the saved checkpoint's Partial names it.
// It takes a sequence number, so the acknowledged prefix and the Partial
// run through it and a later save carries it with everything this run
// acknowledges; but it takes no window space and holds none, as no crash
// of this run can re-send it.
func (t *Tracker) Settle(tx *Txn, ordinal int) {
	t.mu.Lock()
	s := t.numberLocked(tx, ordinal)
	if t.ring.mark(s) && s-tx.firstSeq < uint64(tx.span) {
		tx.settled++
	}
	t.mu.Unlock()
}

// numberLocked gives the event at ordinal of tx the next sequence number
// and extends tx's span of consecutive ordinals.
func (t *Tracker) numberLocked(tx *Txn, ordinal int) uint64 {
	s := t.seq
	t.seq++
	if tx.tracked == 0 {
		tx.firstSeq = s
		if ordinal >= 0 {
			tx.firstOrdinal = ordinal
		}
	}
	if !tx.gap {
		if ordinal < 0 || ordinal == tx.firstOrdinal+tx.span {
			tx.span++
		} else {
			tx.gap = true // the prefix stops at the gap
		}
	}
	tx.tracked++
	return s
}

// NotifyAcks returns a channel signalled each time step more events of
// the oldest unconfirmed transaction were acknowledged and not saved since
// the last signal, so the checkpoint saver can save a large transaction's
// progress (its Partial) sooner than its interval. Call it before tracking
// events; step should be well below Limits.MaxEvents, or the hold fills
// the window before the first signal.
//
// From then on, acknowledgements of that transaction that no saved
// checkpoint contains yet (Saved) hold window space like unacknowledged
// events: a crash re-sends them, so this keeps what a crash inside a large
// transaction re-sends within the window, whatever Kafka's pace against
// the saves'. For the same reason the stream reads no event whose
// acknowledgement the ring could not record (see Full). The saver must
// call Saved or SaveFailed after every save attempt.
func (t *Tracker) NotifyAcks(step int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.kick == nil {
		t.kick = make(chan struct{}, 1)
	}
	t.kickStep = max(step, 1)
	return t.kick
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

// AckSeq acknowledges the event of size bytes that TrackOrdinal numbered s: Kafka
// stored it, or it was settled durably in the dead-letter table.
func (tx *Txn) AckSeq(s Seq, bytes int) {
	t := tx.t
	t.mu.Lock()
	t.ring.mark(uint64(s))
	if tx.finalLSN != 0 && uint64(s)-tx.firstSeq < uint64(tx.span) {
		tx.acked++ // expressible in a Partial: held until saved (heldLocked)
	}
	tx.ackLocked(bytes)
}

// Release frees the window share of an event that will never be
// acknowledged (its publish failed and the stream stops), so the drain
// before stopping can finish. It is not an acknowledgement: tx stays
// pending, so neither the flush position nor the Partial passes it.
func (tx *Txn) Release(bytes int) {
	t := tx.t
	t.mu.Lock()
	t.events--
	t.bytes -= int64(bytes)
	t.mu.Unlock()
	t.signalSpace()
}

// ackLocked acknowledges one event of size bytes of tx with t.mu held;
// it unlocks.
func (tx *Txn) ackLocked(bytes int) {
	t := tx.t
	tx.pending--
	t.events--
	t.bytes -= int64(bytes)
	t.released++
	if tx.pending == 0 {
		t.advanceLocked()
	}
	t.kickLocked()
	room := !t.fullLocked()
	t.mu.Unlock()
	if room {
		t.signalSpace()
	}
}

// heldLocked is the head transaction's acknowledgements that no saved
// checkpoint contains yet (see NotifyAcks). Those of later transactions
// hold nothing until theirs becomes the head: until then a crash re-sends
// their whole transaction anyway.
func (t *Tracker) heldLocked() int {
	if t.kick == nil || t.head >= len(t.txs) {
		return 0
	}
	h := t.txs[t.head]
	return h.acked - h.saved
}

// fullLocked: the window's events or bytes are used up, counting held
// acknowledgements as events; or, with the hold on, the next event would
// be too far past the oldest unacknowledged one for the ring to record its
// acknowledgement (it could then never be saved, and would hold its window
// space until its transaction is confirmed).
func (t *Tracker) fullLocked() bool {
	return t.events+t.heldLocked() >= t.limits.MaxEvents || t.bytes >= t.limits.MaxBytes ||
		t.kick != nil && t.seq-t.ring.next > t.ring.mask
}

// Saved tells the tracker that the checkpoint now holds the snapshot that
// returned tok (the save wrote it, or found it saved already): the
// acknowledgements its Partial contains stop holding window space. Those
// it does not contain keep holding.
func (t *Tracker) Saved(tok SaveToken) {
	t.release(tok, tok.expressed)
}

// SaveFailed tells the tracker that saving the snapshot that returned tok
// failed or timed out. Every acknowledgement the snapshot counted stops
// holding window space all the same, so a broken or locked checkpoint
// table costs duplicates after a crash, never a stopped stream. It
// returns how many acknowledgements it released.
func (t *Tracker) SaveFailed(tok SaveToken) int {
	return t.release(tok, tok.acks)
}

func (t *Tracker) release(tok SaveToken, upTo int) int {
	t.mu.Lock()
	n := 0
	if tx := tok.tx; tx != nil && upTo > tx.saved {
		n, tx.saved = upTo-tx.saved, upTo
	}
	room := !t.fullLocked()
	t.mu.Unlock()
	if room {
		t.signalSpace()
	}
	return n
}

func (t *Tracker) signalSpace() {
	select {
	case t.space <- struct{}{}:
	default:
	}
}

// kickLocked signals NotifyAcks's channel when the head transaction has
// kickStep more acknowledgements no save covers since the last signal,
// also right after it became the head.
func (t *Tracker) kickLocked() {
	if t.kick == nil || t.head >= len(t.txs) {
		return
	}
	h := t.txs[t.head]
	if h != t.kickTx {
		t.kickTx, t.kickDone = h, 0
	}
	if h.acked-max(t.kickDone, h.saved) >= t.kickStep {
		t.kickDone = h.acked
		select {
		case t.kick <- struct{}{}:
		default:
		}
	}
}

// partialLocked is what is known acknowledged of the head transaction: its
// contiguous prefix, and the scattered acknowledgements past it that the
// ring recorded (lanes of different partitions progress at different
// speeds, so past the prefix whole batches of other partitions are often
// acknowledged already).
//
// expressed is how many of this run's acknowledgements of the head (acked)
// the Partial contains: every event within the span that the ring recorded
// is in it, and the settled ones among them are not this run's.
func (t *Tracker) partialLocked() (p Partial, expressed int) {
	if t.head >= len(t.txs) {
		return Partial{}, 0
	}
	h := t.txs[t.head]
	if h.finalLSN == 0 || h.tracked == 0 || t.ring.next < h.firstSeq {
		return Partial{}, 0
	}
	n := min(t.ring.next-h.firstSeq, uint64(h.span))
	p = Partial{CommitLSN: h.finalLSN, Events: h.firstOrdinal + int(n)}
	known := int(n)
	// Past the prefix, only the events with consecutive ordinals (span)
	// map a Seq to an ordinal, and only those within the ring's reach
	// were recorded.
	from := h.firstSeq + n + 1
	end := min(h.firstSeq+uint64(h.span), t.ring.next+t.ring.mask+1, t.ring.high+1)
	for s := from; s < end; s++ {
		if t.ring.has(s) {
			p.mark(int(s - from + 1)) // bit 0 is the prefix's end, never acknowledged
			known++
		}
	}
	if p.Empty() {
		return Partial{}, 0
	}
	return p, max(known-h.settled, 0)
}

// advanceLocked pops fully acknowledged committed transactions from the head.
func (t *Tracker) advanceLocked() {
	moved, popped := false, false
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
		if tx.tracked > 0 {
			t.ring.jump(tx.firstSeq + uint64(tx.tracked))
		}
		t.txs[t.head] = nil
		t.head++
		popped = true
	}
	if popped {
		t.kickLocked() // the new head's acknowledgements hold from now on
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
// transaction's commit time and xid, and the acknowledged prefix of the
// transaction after it. Both are read under one lock, so the Partial is
// always of the oldest transaction not confirmed at LSN.
func (t *Tracker) Last() Acked {
	t.mu.Lock()
	defer t.mu.Unlock()
	a := t.last
	a.LSN = t.flushed
	var expressed int
	a.Partial, expressed = t.partialLocked()
	if t.head < len(t.txs) {
		h := t.txs[t.head]
		a.Token = SaveToken{tx: h, acks: h.acked, expressed: expressed}
	}
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
	return t.fullLocked()
}

// Space is signalled when acknowledgements make room in a full window.
func (t *Tracker) Space() <-chan struct{} { return t.space }

// WindowStats is a snapshot of the window, for metrics and shutdown.
type WindowStats struct {
	Events int
	Bytes  int64
	// Held is the acknowledged events of the head transaction that wait
	// for a checkpoint save (see NotifyAcks): they hold window space, so a
	// stream stopped by a save that never ends has them in flight.
	Held         int
	Transactions int
	Acked        int
	// OldestCommit is the commit time of the oldest transaction with
	// unacknowledged events; zero when none.
	OldestCommit time.Time
}

// Stats returns a snapshot of the window.
func (t *Tracker) Stats() WindowStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := WindowStats{Events: t.events, Bytes: t.bytes, Held: t.heldLocked(), Transactions: len(t.txs) - t.head, Acked: t.released}
	if t.head < len(t.txs) {
		s.OldestCommit = t.txs[t.head].CommitTime
	}
	return s
}
