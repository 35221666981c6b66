package checkpoint

import (
	"testing"
	"time"
)

func TestLastReportsAcknowledgedTransaction(t *testing.T) {
	tr := New(100, Limits{})
	t1 := time.Unix(10, 0)
	a := tr.beginXid(t1, 7)
	tr.track(a, 1)
	tr.Commit(a, 200)
	if got := tr.Last(); got.LSN != 100 || got.Xid != 0 {
		t.Fatalf("before the ack: %+v, want LSN 100 and no transaction", got)
	}
	b := tr.beginXid(t1.Add(time.Second), 8)
	tr.track(b, 1)
	tr.Commit(b, 300)
	b.ack(1) // acknowledged out of order: a still pending
	if got := tr.Last(); got.LSN != 100 {
		t.Fatalf("b acked before a: %+v, want 100", got)
	}
	a.ack(1)
	if got := tr.Last(); got.LSN != 300 || got.Xid != 8 || !got.CommitTime.Equal(t1.Add(time.Second)) {
		t.Fatalf("after both acks: %+v, want LSN 300, xid 8", got)
	}
}
