package checkpoint

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/migrations"
)

var testID = Identity{SystemID: "7300000000000000001", Timeline: 1}

// source is a tracker's Last, settable from the test.
type source struct {
	mu sync.Mutex
	a  Acked
}

func (s *source) set(a Acked) {
	s.mu.Lock()
	s.a = a
	s.mu.Unlock()
}

func (s *source) last() Acked {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a
}

func newTestSaver(t *testing.T, db *fakeDB, prev *Checkpoint, src *source) (*Saver, *[]Checkpoint) {
	t.Helper()
	store := NewStore(db, migrations.Table{Schema: "public", Name: "outbox"}, "outbox_relay")
	s := NewSaver(SaverConfig{Store: store, DB: db, Identity: testID, Prev: prev, Source: src.last, Interval: time.Hour}, WithLogger(testLogger(t)))
	var saves []Checkpoint
	s.cfg.OnSave = func(cp Checkpoint) { saves = append(saves, cp) }
	return s, &saves
}

func save(t *testing.T, s *Saver, capture bool) {
	t.Helper()
	if err := s.Save(context.Background(), capture); err != nil {
		t.Fatal(err)
	}
}

// lastWrite returns the newest row written, failing unless there are n.
func lastWrite(t *testing.T, db *fakeDB, n int) written {
	t.Helper()
	w := db.saved()
	if len(w) != n {
		t.Fatalf("%d checkpoints written, want %d: %+v", len(w), n, w)
	}
	if n == 0 {
		return written{}
	}
	return w[n-1]
}

// A save happens when the position, the decoded position or the partial
// moved, and never moves the saved position backwards; while the position
// stands, the saved transaction is kept.
func TestSaverSavesWhatMoved(t *testing.T) {
	db := &fakeDB{updated: 1}
	src := &source{}
	s, saves := newTestSaver(t, db, nil, src)
	t1, t2 := time.Unix(1000, 0), time.Unix(2000, 0)

	save(t, s, false) // nothing acknowledged yet
	if n := len(db.saved()); n != 0 {
		t.Fatalf("saved %d checkpoints of nothing", n)
	}
	src.set(Acked{LSN: 0x100, CommitTime: t1, Xid: 11})
	save(t, s, false)
	if w := lastWrite(t, db, 1); w.lsn != "0/100" || w.commit != t1 || w.xid != int64(11) || w.decoded != nil || w.system != testID.SystemID {
		t.Fatalf("first save %+v", w)
	}
	save(t, s, false)
	lastWrite(t, db, 1)

	// A restarted tracker reports an older transaction.
	src.set(Acked{LSN: 0x80, CommitTime: time.Unix(500, 0), Xid: 10})
	save(t, s, false)
	lastWrite(t, db, 1)

	// The decoded position alone moves: saved with the saved transaction.
	src.set(Acked{LSN: 0x80, CommitTime: time.Unix(500, 0), Xid: 10, Decoded: 0x300})
	save(t, s, false)
	if w := lastWrite(t, db, 2); w.lsn != "0/100" || w.commit != t1 || w.xid != int64(11) || w.decoded != "0/300" {
		t.Fatalf("decoded-only save %+v", w)
	}
	src.set(Acked{LSN: 0x100, Decoded: 0x200})
	save(t, s, false)
	lastWrite(t, db, 2)

	// Decoded never goes back either.
	src.set(Acked{LSN: 0x400, CommitTime: t2, Xid: 12, Decoded: 0x200})
	save(t, s, false)
	if w := lastWrite(t, db, 3); w.lsn != "0/400" || w.commit != t2 || w.xid != int64(12) || w.decoded != "0/300" {
		t.Fatalf("third save %+v", w)
	}
	if len(*saves) != 3 || (*saves)[2].LSN != 0x400 || (*saves)[2].Decoded != 0x300 || (*saves)[2].Identity != testID {
		t.Fatalf("OnSave saw %+v", *saves)
	}
}

// A saver continuing a checkpoint does not save it again, reuses its
// fence, and keeps its partial until the partial's transaction is
// confirmed.
func TestSaverContinuesFromPrev(t *testing.T) {
	db := &fakeDB{updated: 1}
	f0 := &Fence{LSN: 0x400, Xmin: 40, Xmax: 45, At: time.Unix(40, 0)}
	prev := &Checkpoint{LSN: 0x500, CommitTime: time.Unix(50, 0), Xid: 50, Identity: testID, Fence: f0, Decoded: 0x600,
		Partial: Partial{CommitLSN: 0x700, Events: 3}}
	src := &source{}
	s, _ := newTestSaver(t, db, prev, src)
	for _, a := range []Acked{{}, {LSN: 0x400}, {LSN: 0x500, Decoded: 0x600}, {LSN: 0x500, Partial: Partial{CommitLSN: 0x700, Events: 2}}} {
		src.set(a)
		save(t, s, false)
	}
	lastWrite(t, db, 0)

	src.set(Acked{LSN: 0x500, Partial: Partial{CommitLSN: 0x700, Events: 5}})
	save(t, s, false)
	if w := lastWrite(t, db, 1); w.lsn != "0/500" || w.partialLSN != "0/700" || w.partialEvents != int32(5) || *w.fence() != *f0 || w.xid != int64(50) {
		t.Fatalf("partial grew: %+v", w)
	}
	src.set(Acked{LSN: 0x800, Xid: 80})
	save(t, s, false)
	if w := lastWrite(t, db, 2); w.lsn != "0/800" || w.partialLSN != nil || w.partialEvents != nil || *w.fence() != *f0 || w.decoded != "0/600" {
		t.Fatalf("past the partial: %+v", w)
	}
}

// A saver continuing a checkpoint of an ancestor timeline (a promoted
// standby) saves its position once more under the server's identity, with
// its fence, even though nothing moved: the newest row then names the new
// timeline, which cleanup and replay need. After that it saves only what
// moved, as usual.
func TestSaverCarriesAncestorCheckpoint(t *testing.T) {
	db := &fakeDB{updated: 0}
	f0 := &Fence{LSN: 0x400, Xmin: 40, Xmax: 45, At: time.Unix(40, 0)}
	old := Identity{SystemID: testID.SystemID, Timeline: testID.Timeline + 1}
	prev := &Checkpoint{LSN: 0x500, CommitTime: time.Unix(50, 0), Xid: 50, Identity: old, Fence: f0, Decoded: 0x500}
	src := &source{a: Acked{LSN: 0x300}} // the synchronized slot lags the checkpoint
	s := NewSaver(SaverConfig{Store: NewStore(db, migrations.Table{Schema: "public", Name: "outbox"}, "outbox_relay"), DB: db, Identity: testID, Prev: prev, Source: src.last, Interval: time.Hour}, WithLogger(testLogger(t)))
	save(t, s, false)
	w := lastWrite(t, db, 1)
	if !w.insert || w.lsn != "0/500" || w.system != testID.SystemID || w.timeline != testID.Timeline || *w.fence() != *f0 || w.xid != int64(50) {
		t.Fatalf("carried checkpoint %+v", w)
	}
	save(t, s, false)
	lastWrite(t, db, 1)
	src.set(Acked{LSN: 0x600})
	save(t, s, false)
	if w := lastWrite(t, db, 2); w.lsn != "0/600" || w.timeline != testID.Timeline {
		t.Fatalf("next save %+v", w)
	}
}

// The fence saved with a position is always at or before it (so rows
// with xid >= its Xmin hold every row committed after the position), and
// it is the newest such fence captured. Random walk against a model.
func TestSaverFenceNeverAheadOfPosition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 15))
	db := &fakeDB{updated: 1}
	src := &source{}
	s, _ := newTestSaver(t, db, nil, src)
	var captured []Fence
	wal, acked, xid := pglogrepl.LSN(0x1000), pglogrepl.LSN(0x1000), uint64(100)
	var lastLSN pglogrepl.LSN
	writes := 0
	for i := range 2000 {
		wal += pglogrepl.LSN(rng.IntN(100))
		xid += uint64(rng.IntN(3))
		acked = min(wal, acked+pglogrepl.LSN(rng.IntN(150)))
		src.set(Acked{LSN: acked})
		db.set(wal, xid)
		capture := rng.IntN(3) > 0
		save(t, s, capture)
		if capture {
			captured = append(captured, Fence{LSN: wal, Xmin: xid, Xmax: xid + 1, At: time.Unix(int64(xid), 0)})
		}
		db.mu.Lock()
		n := len(db.writes)
		got := written{}
		if n > 0 {
			got = db.writes[n-1]
		}
		db.mu.Unlock()
		if n == writes {
			continue
		}
		writes = n
		lsn, _ := pglogrepl.ParseLSN(got.lsn)
		if lsn < lastLSN {
			t.Fatalf("step %d: saved %s after %s", i, lsn, lastLSN)
		}
		lastLSN = lsn
		var want *Fence
		for j := range captured {
			if captured[j].LSN <= lsn {
				want = &captured[j]
			}
		}
		f := got.fence()
		switch {
		case f != nil && f.LSN > lsn:
			t.Fatalf("step %d: fence at %s saved with position %s", i, f.LSN, lsn)
		case (f == nil) != (want == nil) || f != nil && *f != *want:
			t.Fatalf("step %d: position %s saved with fence %+v, want %+v", i, lsn, f, want)
		}
	}
	if writes < 100 {
		t.Fatalf("only %d saves: the walk does not exercise the saver", writes)
	}
}

// While the position stands, at most maxFences fences wait; newer ones are
// dropped, so the fence finally applied is older (more conservative), never
// newer than the position.
func TestSaverBoundsPendingFences(t *testing.T) {
	db := &fakeDB{updated: 1}
	src := &source{a: Acked{LSN: 0x10}}
	s, _ := newTestSaver(t, db, nil, src)
	for i := range maxFences + 50 {
		db.set(pglogrepl.LSN(0x1000+i), uint64(100+i))
		save(t, s, true)
	}
	if len(s.pending) != maxFences {
		t.Fatalf("%d fences pending, want %d", len(s.pending), maxFences)
	}
	src.set(Acked{LSN: 0x100000})
	save(t, s, false)
	f := lastWrite(t, db, 2).fence()
	if f == nil || f.LSN != 0x1000+maxFences-1 || f.Xmin != 100+maxFences-1 {
		t.Fatalf("fence %+v, want the newest kept one (at 0x%x)", f, 0x1000+maxFences-1)
	}
	if len(s.pending) != 0 {
		t.Fatalf("%d fences still pending", len(s.pending))
	}
}

// A failed save changes nothing: the next attempt saves the same position.
func TestSaverRetriesFailedSave(t *testing.T) {
	boom := errors.New("connection reset")
	db := &fakeDB{updated: 1, execErr: boom}
	src := &source{a: Acked{LSN: 0x100, Xid: 3}}
	s, saves := newTestSaver(t, db, nil, src)
	if err := s.Save(context.Background(), false); !errors.Is(err, boom) {
		t.Fatalf("Save = %v, want %v", err, boom)
	}
	if len(*saves) != 0 {
		t.Fatal("OnSave called for a failed save")
	}
	db.execErr = nil
	save(t, s, false)
	if w := lastWrite(t, db, 1); w.lsn != "0/100" || w.xid != int64(3) {
		t.Fatalf("retry wrote %+v", w)
	}

	db.captureErr = boom
	src.set(Acked{LSN: 0x200})
	if err := s.Save(context.Background(), true); !errors.Is(err, boom) {
		t.Fatalf("Save with a failing fence = %v", err)
	}
	lastWrite(t, db, 1)
	db.captureErr = nil
	save(t, s, false)
	lastWrite(t, db, 2)
}

// Run saves at every tick with a fence, on a kick without one, and once
// more when it stops; Attempted follows every attempt.
func TestSaverRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &fakeDB{updated: 1}
		db.set(0x50, 7)
		src := &source{a: Acked{LSN: 0x100}}
		s, _ := newTestSaver(t, db, nil, src)
		kick := make(chan struct{})
		attempts := make(chan struct{}, 100)
		s.cfg.Kick, s.cfg.Attempted = kick, func(error) { attempts <- struct{}{} }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx)
		}()
		stopRun(t, cancel, done)
		kick <- struct{}{}
		<-attempts
		if w := lastWrite(t, db, 1); w.lsn != "0/100" || db.captured() != 0 {
			t.Fatalf("kick: wrote %+v, captured %d fences (want none)", w, db.captured())
		}
		src.set(Acked{LSN: 0x200})
		cancel()
		<-done
		<-attempts
		if w := lastWrite(t, db, 2); w.lsn != "0/200" || db.captured() != 0 {
			t.Fatalf("final save %+v, %d fences", w, db.captured())
		}

		// With a short interval the ticks capture fences.
		db2 := &fakeDB{updated: 1}
		db2.set(0x50, 7)
		s2 := NewSaver(SaverConfig{Store: NewStore(db2, migrations.Table{Schema: "public", Name: "outbox"}, "s"), DB: db2, Identity: testID, Source: (&source{a: Acked{LSN: 0x100}}).last, Interval: 5 * time.Millisecond}, WithLogger(testLogger(t)))
		ctx2, cancel2 := context.WithCancel(context.Background())
		done2 := make(chan struct{})
		go func() {
			defer close(done2)
			s2.Run(ctx2)
		}()
		stopRun(t, cancel2, done2)
		deadline := time.Now().Add(5 * time.Second)
		for db2.captured() < 3 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // poll in virtual time: the ticks come every 5ms of it
		}
		cancel2()
		<-done2
		if db2.captured() < 3 {
			t.Fatalf("%d fences captured by ticks", db2.captured())
		}
		if w := lastWrite(t, db2, 1); w.fence() == nil || w.fence().LSN != 0x50 {
			t.Fatalf("tick save %+v", w)
		}
	})
}

// stopRun stops a Saver's Run (cancel, then wait for done) when the test
// ends, so that a failed check does not leave it blocked in the synctest
// bubble, which would crash the test binary instead of failing the test.
func stopRun(t *testing.T, cancel context.CancelFunc, done <-chan struct{}) {
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// Kicks closer than KickGap to the previous save wait for the gap; a stop
// during that wait still makes the final save.
func TestSaverKickGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const gap = 60 * time.Millisecond
		db := &fakeDB{updated: 1}
		src := &source{a: Acked{LSN: 0x100}}
		s, _ := newTestSaver(t, db, nil, src)
		kick := make(chan struct{})
		attempts := make(chan time.Time, 100)
		s.cfg.Kick, s.cfg.KickGap, s.cfg.Attempted = kick, gap, func(error) { attempts <- time.Now() }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx)
		}()
		stopRun(t, cancel, done)
		start := time.Now()
		kick <- struct{}{}
		<-attempts
		src.set(Acked{LSN: 0x200})
		kick <- struct{}{}
		if second := <-attempts; second.Sub(start) < gap {
			t.Fatalf("second kick saved %v after the first, want at least %v", second.Sub(start), gap)
		}
		lastWrite(t, db, 2)

		cancel()
		<-done

		// Stopped while a kick waits for the gap.
		db = &fakeDB{updated: 1}
		src = &source{a: Acked{LSN: 0x300}}
		s, _ = newTestSaver(t, db, nil, src)
		kick = make(chan struct{})
		// A fresh channel: the first Run's final save signalled the old one,
		// and reading that signal here would let the source move before this
		// Run's first save.
		attempts = make(chan time.Time, 100)
		s.cfg.Kick, s.cfg.KickGap, s.cfg.Attempted = kick, time.Hour, func(error) { attempts <- time.Now() }
		ctx, cancel = context.WithCancel(context.Background())
		done = make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx)
		}()
		stopRun(t, cancel, done)
		kick <- struct{}{}
		<-attempts
		src.set(Acked{LSN: 0x400})
		kick <- struct{}{}
		cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second): // virtual time: a Run stuck in the hour's gap fails here
			t.Fatal("Run did not stop while a kick waited")
		}
		if w := lastWrite(t, db, 2); w.lsn != "0/400" {
			t.Fatalf("final save %+v", w)
		}
	})
}

// Store.Save updates the newest row when it can, inserts otherwise, and
// prunes only when it started a new row and a retention is set. Unknown
// values are written as NULL.
func TestStoreSaveStatements(t *testing.T) {
	ctx := context.Background()
	tbl := migrations.Table{Schema: "public", Name: "outbox"}
	cp := Checkpoint{LSN: 0x100, Identity: testID}

	db := &fakeDB{updated: 1}
	if err := NewStore(db, tbl, "s").Save(ctx, cp, time.Hour); err != nil {
		t.Fatal(err)
	}
	if w := lastWrite(t, db, 1); w.insert || len(db.deletes) != 0 {
		t.Fatalf("in-place update: %+v, prunes %v", w, db.deletes)
	}
	w := db.saved()[0]
	if w.commit != nil || w.xid != nil || w.fenceLSN != nil || w.fenceXmin != nil || w.fenceXmax != nil || w.fenceAt != nil ||
		w.decoded != nil || w.partialLSN != nil || w.partialEvents != nil || w.partialAcked != nil {
		t.Fatalf("unknown values must be NULL: %+v", w)
	}

	db = &fakeDB{}
	if err := NewStore(db, tbl, "s").Save(ctx, cp, 0); err != nil {
		t.Fatal(err)
	}
	if w := lastWrite(t, db, 1); !w.insert || len(db.deletes) != 0 {
		t.Fatalf("insert without retention: %+v, prunes %v", w, db.deletes)
	}
	full := Checkpoint{LSN: 0x100, Identity: testID, CommitTime: time.Unix(9, 0), Xid: math.MaxUint32,
		Fence: &Fence{LSN: 0x80, Xmin: 1 << 33, Xmax: 1<<33 + 5, At: time.Unix(8, 0)}, Decoded: 0x200,
		Partial: Partial{CommitLSN: 0x300, Events: math.MaxInt32 + 10, Acked: []byte{1}}}
	if err := NewStore(db, tbl, "s").Save(ctx, full, 90*time.Minute); err != nil {
		t.Fatal(err)
	}
	w = lastWrite(t, db, 2)
	if !w.insert || w.xid != int64(math.MaxUint32) || *w.fence() != *full.Fence || w.decoded != "0/200" ||
		w.partialLSN != "0/300" || w.partialEvents != int32(math.MaxInt32) || string(w.partialAcked.([]byte)) != "\x01" {
		t.Fatalf("full checkpoint written as %+v", w)
	}
	if len(db.deletes) != 1 || db.deletes[0] != 5400 {
		t.Fatalf("prunes %v, want one with 5400 s", db.deletes)
	}

	boom := errors.New("boom")
	if err := NewStore(&fakeDB{execErr: boom}, tbl, "s").Save(ctx, cp, 0); !errors.Is(err, boom) {
		t.Fatalf("Save = %v", err)
	}
	if err := NewStore(&fakeDB{deleteErr: boom}, tbl, "s").Save(ctx, cp, time.Hour); !errors.Is(err, boom) {
		t.Fatalf("Save with a failing prune = %v", err)
	}
}

// TestSaverTimeout: a save blocked (a lock on the checkpoint table) is
// abandoned after SaveTimeout and reported to Attempted as an error, and
// the next attempt saves once the block is gone.
func TestSaverTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		db := &fakeDB{updated: 1, block: make(chan struct{})}
		src := &source{a: Acked{LSN: 0x100}}
		s, _ := newTestSaver(t, db, nil, src)
		kick := make(chan struct{})
		attempts := make(chan error, 100)
		s.cfg.Kick, s.cfg.SaveTimeout, s.cfg.Attempted = kick, 50*time.Millisecond, func(err error) { attempts <- err }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Run(ctx)
		}()
		defer func() {
			cancel()
			<-done
		}()
		start := time.Now()
		kick <- struct{}{}
		select {
		case err := <-attempts:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("blocked save reported %v, want a deadline error", err)
			}
			// Virtual time: exactly the SaveTimeout unless Run waits for
			// something else.
			if d := time.Since(start); d < 50*time.Millisecond || d > 5*time.Second {
				t.Fatalf("blocked save gave up after %s, want about the 50ms SaveTimeout", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a blocked save was never abandoned")
		}
		lastWrite(t, db, 0)
		db.mu.Lock()
		close(db.block)
		db.mu.Unlock()
		kick <- struct{}{}
		if err := <-attempts; err != nil {
			t.Fatalf("save after the block: %v", err)
		}
		lastWrite(t, db, 1)
	})
}
