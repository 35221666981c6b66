package checkpoint

import (
	"bytes"
	"math/bits"

	"github.com/jackc/pglogrepl"
)

// Seq numbers the events a Tracker tracks, in stream order, across
// transactions. An acknowledgement that names its Seq (Txn.AckSeq) lets the
// tracker know which events are acknowledged, not only how many.
type Seq uint64

// Partial is what is known acknowledged of the oldest transaction not yet
// confirmed: its events with ordinals 0..Events-1, and those Acked marks
// past them, were acknowledged by Kafka (or settled in the dead-letter
// table). A restart inside that transaction may skip exactly them when the
// slot replays it. The zero Partial knows nothing.
type Partial struct {
	// CommitLSN is the transaction's commit LSN (pgoutput Begin's final
	// LSN), which names it in the WAL.
	CommitLSN pglogrepl.LSN
	// Events is the length of the acknowledged prefix, in ordinals.
	Events int
	// Acked marks acknowledged events past the prefix: bit i (byte i/8,
	// bit i%8) stands for ordinal Events+i. Nil when none.
	//
	// The part past the prefix matters as much as the prefix: the lanes
	// of different partitions progress at different speeds, so while one
	// partition's batch is in flight the others' later events are
	// acknowledged already. Saving only the prefix would re-send those
	// after a crash, a multiple of the in-flight window with skewed
	// partitions.
	Acked []byte
}

// mark sets bit i of Acked (ordinal Events+i).
func (p *Partial) mark(i int) {
	if need := i/8 + 1; need > len(p.Acked) {
		p.Acked = append(p.Acked, make([]byte, need-len(p.Acked))...)
	}
	p.Acked[i/8] |= 1 << (i % 8)
}

// Empty reports whether p knows no acknowledged event.
func (p Partial) Empty() bool { return p.Events <= 0 && len(p.Acked) == 0 }

// Has reports whether the event at ordinal is known acknowledged.
func (p Partial) Has(ordinal int) bool {
	if ordinal < p.Events {
		return true
	}
	i := ordinal - p.Events
	return i/8 < len(p.Acked) && p.Acked[i/8]&(1<<(i%8)) != 0
}

// Known is the number of events p knows acknowledged.
func (p Partial) Known() int {
	n := max(p.Events, 0)
	for _, b := range p.Acked {
		n += bits.OnesCount8(b)
	}
	return n
}

// Equal reports whether p and q say the same.
func (p Partial) Equal(q Partial) bool {
	return p.CommitLSN == q.CommitLSN && p.Events == q.Events && bytes.Equal(p.Acked, q.Acked)
}

// Union is what p and q, facts about the same transaction, know together:
// both are acknowledgements Kafka holds, so each event either knows is.
func (p Partial) Union(q Partial) Partial {
	if p.Empty() {
		return q
	}
	if q.Empty() {
		return p
	}
	lo := max(p.Events, q.Events)
	var high int // one past the highest known ordinal
	for _, x := range []Partial{p, q} {
		for i := len(x.Acked)*8 - 1; i >= 0; i-- {
			if x.Acked[i/8]&(1<<(i%8)) != 0 {
				high = max(high, x.Events+i+1)
				break
			}
		}
	}
	for lo < high && (p.Has(lo) || q.Has(lo)) {
		lo++
	}
	u := Partial{CommitLSN: p.CommitLSN, Events: lo}
	for o := lo + 1; o < high; o++ {
		if p.Has(o) || q.Has(o) {
			u.mark(o - lo)
		}
	}
	return u
}

// ackRing records which events are acknowledged beyond the contiguous
// acknowledged prefix of sequence numbers. A bitmap over a fixed ring keeps
// the cost O(1) amortized per acknowledgement (each bit is set and cleared
// once) and the memory fixed, whatever the transaction size.
//
// Every Seq below next is settled. An acknowledgement further than the ring
// ahead of next is not recorded: the prefix then stops short of it until
// its transaction is confirmed (jump), which costs duplicates after a
// crash, never a skipped event Kafka does not have. With a saver attached
// (Tracker.NotifyAcks) the tracker reads no event that far ahead, so every
// acknowledgement it holds for a save can be saved.
type ackRing struct {
	bits []uint64
	mask uint64 // ring size in bits - 1 (a power of two)
	next uint64
	// high is the highest Seq recorded past next (meaningful while it is
	// at least next): where a Partial's Acked bits end.
	high uint64
}

// Ring sizes, in bits. The span between the oldest unacknowledged event and
// the newest acknowledged one is usually a few times the in-flight window
// (lanes of different partitions progress at different speeds); 64 bits
// per window slot is 8 bytes per slot.
const (
	minRingBits = 1 << 12
	maxRingBits = 1 << 24 // 2 MiB
)

func newAckRing(window int) ackRing {
	size := uint64(minRingBits)
	for size < uint64(window)*64 && size < maxRingBits {
		size <<= 1
	}
	return ackRing{bits: make([]uint64, size/64), mask: size - 1}
}

func (r *ackRing) has(s uint64) bool {
	i := s & r.mask
	return r.bits[i>>6]&(1<<(i&63)) != 0
}

func (r *ackRing) set(s uint64) {
	i := s & r.mask
	r.bits[i>>6] |= 1 << (i & 63)
}

func (r *ackRing) unset(s uint64) {
	i := s & r.mask
	r.bits[i>>6] &^= 1 << (i & 63)
}

// mark records the acknowledgement of s and reports whether the ring
// holds it: false when s was settled already or is out of reach.
func (r *ackRing) mark(s uint64) bool {
	switch {
	case s < r.next:
		return false // settled already (its transaction was confirmed)
	case s-r.next > r.mask:
		return false // out of reach: see the type's comment
	case s != r.next:
		r.set(s)
		r.high = max(r.high, s)
		return true
	}
	r.next++
	r.consume()
	return true
}

// consume moves next over the acknowledgements recorded right after it.
func (r *ackRing) consume() {
	for r.has(r.next) {
		r.unset(r.next)
		r.next++
	}
}

// jump settles every Seq below to: the transaction that ends there was
// confirmed, so all of its events (and all before them) are acknowledged.
func (r *ackRing) jump(to uint64) {
	if to <= r.next {
		return
	}
	if to-r.next > r.mask {
		clear(r.bits)
	} else {
		for s := r.next; s < to; s++ {
			r.unset(s)
		}
	}
	r.next = to
	r.consume()
}
