package cleanup

import (
	"bytes"
	"testing"
	"time"
)

func TestResultWrite(t *testing.T) {
	cutoff := time.Date(2026, 12, 1, 18, 0, 0, 0, time.FixedZone("CET", 3600))
	res := Result{Cutoff: cutoff, Xid: 812, LimitedBy: "checkpoint 0/5000 fence", Deleted: 2500, Batches: 3,
		Dropped: []Dropped{{Partition: "public.outbox_2026_10", Rows: 900}}, Kept: []string{"public.outbox_2026_11 (locked)"},
		PrunedCheckpoints: 4, Elapsed: 1234567 * time.Microsecond, WALBytes: 65536, Stopped: "max-duration",
		Old: 10, Confirmed: 8, Eligible: 7}
	var b bytes.Buffer
	res.Write(&b, "public.outbox", false)
	want := `cleanup public.outbox: rows created before 2026-12-01T17:00:00Z and below xid 812 (checkpoint 0/5000 fence)
  dropped partition public.outbox_2026_10 (900 rows)
  kept partition public.outbox_2026_11 (locked)
  pruned 4 checkpoints older than the cutoff
deleted 2500 rows in 3 batches, dropped 1 partitions, in 1.235s; WAL written meanwhile 65536 bytes
stopped early (max-duration): run again to continue
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}

	b.Reset()
	res.Write(&b, "public.outbox", true)
	want = `cleanup public.outbox: rows created before 2026-12-01T17:00:00Z and below xid 812 (checkpoint 0/5000 fence)
dry run: 10 rows older than the cutoff; 8 confirmed by a checkpoint; 7 would be deleted; 3 kept (not yet confirmed, dead-lettered or quarantined)
  would drop partition public.outbox_2026_10 (900 rows)
dry run: nothing deleted
`
	if b.String() != want {
		t.Errorf("dry run: got\n%s\nwant\n%s", b.String(), want)
	}
}
