package kafkafetch

import (
	"slices"
	"testing"

	"github.com/segmentio/kafka-go/protocol/fetch"
)

// fuzzLog is a partition log generated from fuzz bytes, with what a
// read_committed and a read_uncommitted consumer must see of it.
type fuzzLog struct {
	tLog
	committed   []int64 // offsets of records that are not in an aborted transaction
	uncommitted []int64 // offsets of every data record
	aborted     []abortedRange
}

// abortedRange is an aborted transaction: first record to ABORT marker.
type abortedRange struct {
	pid         int64
	first, last int64
}

// genLog interprets data as a program: each byte appends a
// non-transactional batch, a transactional batch (opening its producer's
// transaction) or a COMMIT or ABORT marker, for one of three producers
// (or none). Transactions still open at the end are committed.
func genLog(data []byte) *fuzzLog {
	l := &fuzzLog{}
	type open struct {
		first   int64
		offsets []int64
	}
	txns := map[int64]*open{}
	end := func(pid int64, abort bool) {
		tx := txns[pid]
		if tx == nil {
			return
		}
		delete(txns, pid)
		typ := controlCommit
		if abort {
			typ = controlAbort
		}
		at := l.marker(pid, typ)
		if abort {
			l.aborted = append(l.aborted, abortedRange{pid: pid, first: tx.first, last: at})
		} else {
			l.committed = append(l.committed, tx.offsets...)
		}
	}
	for i := 0; i < len(data) && len(l.batches) < 200; i++ {
		op := data[i]
		pid := int64(op>>2&3) - 1 // -1 (no producer id), 0, 1, 2
		n := 1 + int(op>>4&3)
		switch op & 3 {
		case 0:
			base := l.data(pid, false, n)
			l.committed = append(l.committed, span(base, base+int64(n)-1)...)
			l.uncommitted = append(l.uncommitted, span(base, base+int64(n)-1)...)
		case 1:
			pid = max(pid, 0)
			base := l.data(pid, true, n)
			if txns[pid] == nil {
				txns[pid] = &open{first: base}
			}
			txns[pid].offsets = append(txns[pid].offsets, span(base, base+int64(n)-1)...)
			l.uncommitted = append(l.uncommitted, span(base, base+int64(n)-1)...)
		default:
			end(max(pid, 0), op&3 == 3)
		}
	}
	for pid := range int64(3) {
		end(pid, false)
	}
	slices.Sort(l.committed)
	return l
}

// FuzzDecode generates a log of transactional and plain batches of several
// producers, encodes the fetch response a broker would send for a fetch
// at an arbitrary offset (starting at the batch that holds it, cut after
// an arbitrary batch, with the aborted transactions that overlap it in an
// arbitrary order), decodes it with kafka-go and the decoder, and checks
// the messages against the log's truth: read_committed sees exactly the
// records outside aborted transactions, read_uncommitted every data
// record, both from the fetch offset on, in order, and the next offset is
// past the response's last batch.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{0x01, 0x05, 0x02, 0x01, 0x03, 0x01, 0x02}, uint16(0), uint8(0), uint8(0))
	f.Add([]byte{0x11, 0x25, 0x00, 0x07, 0x31, 0x03, 0x15, 0x06, 0x04, 0x01, 0x02}, uint16(3), uint8(1), uint8(5))
	f.Add([]byte{0x01, 0x03, 0x01, 0x03, 0x01, 0x02, 0x09, 0x0f, 0x0a}, uint16(7), uint8(0), uint8(1))
	f.Fuzz(func(t *testing.T, program []byte, at uint16, cut uint8, order uint8) {
		l := genLog(program)
		offset := int64(at) % (l.next + 1)
		start := slices.IndexFunc(l.batches, func(b tBatch) bool { return b.last() >= offset })
		var batches []tBatch
		if start >= 0 {
			batches = l.batches[start:]
			batches = batches[:len(batches)-int(cut)%len(batches)]
		}
		next := offset
		if len(batches) > 0 {
			next = batches[len(batches)-1].last() + 1
		}
		// The broker lists the aborted transactions that end at or after
		// the fetch offset and begin before the response's end.
		var aborted []fetch.ResponseTransaction
		for _, a := range l.aborted {
			if a.last >= offset && a.first < next {
				aborted = append(aborted, fetch.ResponseTransaction{ProducerID: a.pid, FirstOffset: a.first})
			}
		}
		if order&1 != 0 {
			slices.Reverse(aborted)
		}
		if order&2 != 0 && len(aborted) > 1 {
			aborted[0], aborted[len(aborted)-1] = aborted[len(aborted)-1], aborted[0]
		}
		within := func(offs []int64) []int64 {
			var w []int64
			for _, o := range offs {
				if o >= offset && o < next {
					w = append(w, o)
				}
			}
			return w
		}
		wire := tResponse{topic: "t", hwm: l.next, aborted: aborted, batches: batches}.encode()
		for _, readCommitted := range []bool{true, false} {
			want := within(l.uncommitted)
			if readCommitted {
				want = within(l.committed)
			}
			out, err := decoder{topic: "t", readCommitted: readCommitted}.decode(parse(t, wire), offset)
			if err != nil {
				t.Fatalf("read_committed=%v: %v", readCommitted, err)
			}
			if got := offsetsOf(t, out); !slices.Equal(got, want) {
				t.Fatalf("read_committed=%v at %d: offsets %v, want %v", readCommitted, offset, got, want)
			}
			if out.next != next {
				t.Fatalf("read_committed=%v at %d: next %d, want %d", readCommitted, offset, out.next, next)
			}
		}
	})
}
