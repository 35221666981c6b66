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
		tx := tr.Begin(now)
		for j := 0; j < 10; j++ {
			tr.Track(tx, 300)
		}
		tr.Commit(tx, pglogrepl.LSN(i+10))
		for j := 0; j < 10; j++ {
			tx.Ack(300)
		}
	}
}

// BenchmarkAckParallel measures acknowledgements from several lanes at once.
func BenchmarkAckParallel(b *testing.B) {
	tr := New(0, Limits{MaxEvents: 1 << 30, MaxBytes: 1 << 50})
	tx := tr.Begin(time.Now())
	for i := 0; i < b.N; i++ {
		tr.Track(tx, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tx.Ack(1)
		}
	})
}
