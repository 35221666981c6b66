package checkpoint

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// A saver against the server: the fence saved with a position is never
// ahead of it, and a restarted saver continuing the checkpoint neither
// saves an older position nor loses the fence.
func TestDBSaver(t *testing.T) {
	e := newDBEnv(t)
	src := &source{a: Acked{LSN: 0x10, Xid: 3, CommitTime: time.Unix(100, 0)}}
	s := NewSaver(SaverConfig{Store: e.store, DB: e.pool, Identity: testID, Source: src.last, Interval: time.Hour}, WithLogger(testLogger(t)))
	if err := s.Save(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if cp := e.latest(t); cp.LSN != 0x10 || cp.Fence != nil || cp.Xid != 3 {
		t.Fatalf("first checkpoint %+v: the fence (taken at the WAL end) is ahead of 0/10", cp)
	}

	var wal string
	if err := e.pool.QueryRow(e.ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&wal); err != nil {
		t.Fatal(err)
	}
	pos, _ := pglogrepl.ParseLSN(wal)
	pos++
	src.set(Acked{LSN: pos, Xid: 4, CommitTime: time.Unix(200, 0), Decoded: pos + 10})
	if err := s.Save(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	cp := e.latest(t)
	if cp.LSN != pos || cp.Fence == nil || cp.Fence.LSN > cp.LSN || cp.Fence.Xmin > cp.Fence.Xmax || cp.Decoded != pos+10 {
		t.Fatalf("second checkpoint %+v (fence %+v): want the first fence, at or before %s", cp, cp.Fence, pos)
	}

	// Restart: the new tracker starts behind the checkpoint.
	src2 := &source{a: Acked{LSN: 0x10}}
	s2 := NewSaver(SaverConfig{Store: e.store, DB: e.pool, Identity: testID, Prev: &cp, Source: src2.last, Interval: time.Hour}, WithLogger(testLogger(t)))
	if err := s2.Save(e.ctx, true); err != nil {
		t.Fatal(err)
	}
	if got := e.latest(t); got.LSN != pos || got.Xid != 4 || got.Fence == nil || got.Fence.LSN != cp.Fence.LSN {
		t.Fatalf("after a restart behind the checkpoint: %+v", got)
	}
	res, err := e.store.Resume(e.ctx, nil, testID, 0x10, 0)
	if err != nil || res.Prev == nil || res.SkipBefore != pos {
		t.Fatalf("Resume = %+v, %v; want to skip to %s", res, err, pos)
	}
}
