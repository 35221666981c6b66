package checkpoint

import "github.com/jackc/pglogrepl"

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
	Acked []byte
}

// ackRing records which events are acknowledged beyond the contiguous
// acknowledged prefix of sequence numbers. A bitmap over a fixed ring keeps
// the cost O(1) amortized per acknowledgement (each bit is set and cleared
// once) and the memory fixed, whatever the transaction size.
//
// Every Seq below next is settled. An acknowledgement further than the ring
// ahead of next is not recorded: the prefix then stops short of it until
// its transaction is confirmed (jump), which costs duplicates after a
// crash, never a skipped event Kafka does not have.
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

// mark records the acknowledgement of s and reports whether next moved.
func (r *ackRing) mark(s uint64) bool {
	switch {
	case s < r.next:
		return false // settled already (its transaction was confirmed)
	case s-r.next > r.mask:
		return false // out of reach: see the type's comment
	case s != r.next:
		r.set(s)
		r.high = max(r.high, s)
		return false
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
