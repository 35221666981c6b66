package checkpoint

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// BenchmarkTrackAck measures the per-event cost of the tracker: track on
// the stream's side, acknowledge from a lane, in 10-event transactions.
func BenchmarkTrackAck(b *testing.B) {
	tr := New(0, Limits{MaxEvents: 1 << 30, MaxBytes: 1 << 50})
	now := time.Now()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 10 {
		tx := tr.begin(now)
		for j := 0; j < 10; j++ {
			tr.track(tx, 300)
		}
		tr.Commit(tx, pglogrepl.LSN(i+10))
		for j := 0; j < 10; j++ {
			tx.ack(300)
		}
	}
}

// BenchmarkAckParallel measures acknowledgements from several lanes at once.
func BenchmarkAckParallel(b *testing.B) {
	tr := New(0, Limits{MaxEvents: 1 << 30, MaxBytes: 1 << 50})
	tx := tr.begin(time.Now())
	for i := 0; i < b.N; i++ {
		tr.track(tx, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tx.ack(1)
		}
	})
}

// BenchmarkTrackAckSeq is BenchmarkTrackAck on the relay's path: ordinals
// tracked and acknowledged by Seq, so the acknowledged prefix is kept.
func BenchmarkTrackAckSeq(b *testing.B) {
	tr := New(0, Limits{MaxEvents: 1 << 30, MaxBytes: 1 << 50})
	tr.NotifyAcks(1000)
	now := time.Now()
	var seqs [10]Seq
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 10 {
		tx := tr.BeginTx(now, 1, pglogrepl.LSN(i+5))
		for j := range seqs {
			seqs[j] = tr.TrackOrdinal(tx, j, 300)
		}
		tr.Commit(tx, pglogrepl.LSN(i+10))
		for j := len(seqs) - 1; j >= 0; j-- { // out of order
			tx.AckSeq(seqs[j], 300)
		}
	}
}

// BenchmarkLargeTxAckSeq acknowledges one large transaction's events with
// a lag, as lanes of several partitions do.
func BenchmarkLargeTxAckSeq(b *testing.B) {
	tr := New(0, Limits{MaxEvents: 1 << 30, MaxBytes: 1 << 50})
	tr.NotifyAcks(1000)
	tx := tr.BeginTx(time.Now(), 1, 5)
	const lag = 64
	var ring [lag]Seq
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := tr.TrackOrdinal(tx, i, 300)
		if i >= lag {
			tx.AckSeq(ring[(i*7)%lag], 300)
		}
		ring[(i*7)%lag] = s
	}
}
