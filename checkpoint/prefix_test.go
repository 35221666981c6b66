package checkpoint

import (
	"math/rand"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// trackN tracks n events of tx from ordinal first on and returns their Seqs.
func trackN(tr *Tracker, tx *Txn, first, n int) []Seq {
	seqs := make([]Seq, n)
	for i := range seqs {
		seqs[i] = tr.TrackOrdinal(tx, first+i, 1)
	}
	return seqs
}

// wantPartial checks the prefix of the Partial (what is acknowledged past
// it is checked by TestPartialMatchesModel).
func wantPartial(t *testing.T, tr *Tracker, lsn pglogrepl.LSN, events int) {
	t.Helper()
	got := tr.Last().Partial
	if got.Events != events || events > 0 && got.CommitLSN != lsn {
		t.Fatalf("partial %+v, want prefix %d of %s", got, events, lsn)
	}
}

// partialOf is the Partial of the transaction committing at lsn whose
// events are acknowledged as acked says.
func partialOf(lsn pglogrepl.LSN, acked []bool) Partial {
	p := Partial{CommitLSN: lsn}
	for p.Events < len(acked) && acked[p.Events] {
		p.Events++
	}
	for o := p.Events + 1; o < len(acked); o++ {
		if acked[o] {
			i := o - p.Events
			for len(p.Acked) <= i/8 {
				p.Acked = append(p.Acked, 0)
			}
			p.Acked[i/8] |= 1 << (i % 8)
		}
	}
	if p.Events == 0 && p.Acked == nil {
		return Partial{}
	}
	return p
}

// Acknowledgements from several partitions arrive out of order: the prefix
// is the contiguous acknowledged run from ordinal 0, never more.
func TestPartialOutOfOrderAcks(t *testing.T) {
	tr := New(100, Limits{})
	tx := tr.BeginTx(time.Time{}, 1, 500)
	s := trackN(tr, tx, 0, 10)
	wantPartial(t, tr, 0, 0)
	// Partition B is ahead of partition A (ordinals 0, 1, 4 are A's).
	for _, i := range []int{2, 3, 5, 6, 7} {
		tx.AckSeq(s[i], 1)
	}
	wantPartial(t, tr, 0, 0) // ordinal 0 not acknowledged: nothing may be skipped
	tx.AckSeq(s[0], 1)
	wantPartial(t, tr, 500, 1)
	tx.AckSeq(s[1], 1)
	wantPartial(t, tr, 500, 4)
	tx.AckSeq(s[4], 1)
	wantPartial(t, tr, 500, 8)
	tx.AckSeq(s[9], 1)
	wantPartial(t, tr, 500, 8)
	tx.AckSeq(s[8], 1)
	wantPartial(t, tr, 500, 10) // all acknowledged, not committed yet
	tr.Commit(tx, 600)
	if tr.Flushed() != 600 {
		t.Fatalf("flushed %s, want 600", tr.Flushed())
	}
	wantPartial(t, tr, 0, 0) // confirmed: no partial left to apply
}

// Only the oldest unconfirmed transaction has a Partial; a later one's
// acknowledgements count once it becomes the oldest.
func TestPartialIsTheHeadTransactions(t *testing.T) {
	tr := New(0, Limits{})
	a := tr.BeginTx(time.Time{}, 1, 100)
	sa := trackN(tr, a, 0, 3)
	tr.Commit(a, 110)
	b := tr.BeginTx(time.Time{}, 2, 200)
	sb := trackN(tr, b, 0, 3)
	for _, s := range sb {
		b.AckSeq(s, 1)
	}
	a.AckSeq(sa[0], 1)
	wantPartial(t, tr, 100, 1)
	a.AckSeq(sa[2], 1)
	wantPartial(t, tr, 100, 1)
	a.AckSeq(sa[1], 1)
	// a is confirmed; b (open, fully acknowledged so far) is the head.
	if got := tr.Last(); got.LSN != 110 || !got.Partial.Equal(Partial{CommitLSN: 200, Events: 3}) {
		t.Fatalf("last %+v, want LSN 110 and b's 3 events", got)
	}
	sb = append(sb, trackN(tr, b, 3, 2)...)
	wantPartial(t, tr, 200, 3)
	b.AckSeq(sb[4], 1)
	wantPartial(t, tr, 200, 3)
	b.AckSeq(sb[3], 1)
	wantPartial(t, tr, 200, 5)
}

// A transaction whose first ordinals a restart skipped (a checkpoint's
// Partial) keeps them in its prefix: the next checkpoint must not forget
// them.
func TestPartialCountsSkippedPrefix(t *testing.T) {
	tr := New(0, Limits{})
	tx := tr.BeginTx(time.Time{}, 1, 900)
	s := trackN(tr, tx, 700, 5)
	wantPartial(t, tr, 900, 700)
	tx.AckSeq(s[1], 1)
	wantPartial(t, tr, 900, 700)
	tx.AckSeq(s[0], 1)
	wantPartial(t, tr, 900, 702)
}

// An event whose publish failed is released from the window, not
// acknowledged: the prefix stops before it.
func TestPartialReleaseIsNotAck(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 3})
	tx := tr.BeginTx(time.Time{}, 1, 50)
	s := trackN(tr, tx, 0, 3)
	tx.AckSeq(s[0], 1)
	tx.Release(1)
	tx.AckSeq(s[2], 1)
	wantPartial(t, tr, 50, 1)
	if st := tr.Stats(); st.Events != 0 {
		t.Fatalf("window holds %d events after release, want 0", st.Events)
	}
	tr.Commit(tx, 60)
	if tr.Flushed() != 0 {
		t.Fatalf("flushed %s past a released event", tr.Flushed())
	}
}

// Ordinals that do not follow each other end the prefix at the gap.
func TestPartialStopsAtOrdinalGap(t *testing.T) {
	tr := New(0, Limits{})
	tx := tr.BeginTx(time.Time{}, 1, 50)
	a := tr.TrackOrdinal(tx, 0, 1)
	b := tr.TrackOrdinal(tx, 1, 1)
	c := tr.TrackOrdinal(tx, 5, 1)
	for _, s := range []Seq{a, b, c} {
		tx.AckSeq(s, 1)
	}
	wantPartial(t, tr, 50, 2)
}

// Without a commit LSN (beginXid) or Seq (ack) there is no Partial.
func TestPartialNeedsLSNAndSeq(t *testing.T) {
	tr := New(0, Limits{})
	tx := tr.beginXid(time.Time{}, 1)
	s := tr.track(tx, 1)
	tx.AckSeq(s, 1)
	wantPartial(t, tr, 0, 0)
	tr.Commit(tx, 10)
	tx2 := tr.BeginTx(time.Time{}, 2, 20)
	tr.track(tx2, 1)
	tx2.ack(1)
	wantPartial(t, tr, 0, 0)
}

// Acknowledgements further ahead than the ring are dropped: the prefix is
// then smaller than the truth (duplicates after a crash), never larger,
// and catches up once the transaction is confirmed.
func TestPartialRingOverflowUnderestimates(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 1}) // smallest ring
	size := len(tr.ring.bits) * 64
	tx := tr.BeginTx(time.Time{}, 1, 10)
	s := trackN(tr, tx, 0, 3*size)
	for i := len(s) - 1; i >= 1; i-- {
		tx.AckSeq(s[i], 1)
	}
	wantPartial(t, tr, 0, 0)
	tx.AckSeq(s[0], 1)
	if got := tr.Last().Partial; got.Events < 1 || got.Events > len(s) {
		t.Fatalf("partial %+v out of range", got)
	}
	tr.Commit(tx, 20)
	next := tr.BeginTx(time.Time{}, 2, 30)
	ns := trackN(tr, next, 0, 2)
	next.AckSeq(ns[0], 1)
	wantPartial(t, tr, 30, 1)
}

// Random acknowledgement orders over many transactions: the Partial always
// equals the model's contiguous acknowledged prefix of the head.
func TestPartialMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for round := 0; round < 50; round++ {
		tr := New(0, Limits{MaxEvents: 64})
		type ev struct {
			tx  int
			seq Seq
		}
		var txs []*Txn
		var acked [][]bool
		var committed []bool
		var pending []ev
		lsn := pglogrepl.LSN(1000)
		check := func() {
			t.Helper()
			head := -1
			for i := range txs {
				done := committed[i]
				for _, a := range acked[i] {
					done = done && a
				}
				if !done {
					head = i
					break
				}
			}
			want := Partial{}
			if head >= 0 {
				want = partialOf(pglogrepl.LSN(1000+100*head), acked[head])
			}
			if got := tr.Last().Partial; !got.Equal(want) {
				t.Fatalf("round %d: partial %+v, want %+v", round, got, want)
			}
		}
		for step := 0; step < 400; step++ {
			open := len(txs) > 0 && !committed[len(txs)-1]
			switch r := rng.Intn(10); {
			case !open && r < 2:
				txs = append(txs, tr.BeginTx(time.Time{}, uint32(len(txs)+1), lsn))
				acked = append(acked, nil)
				committed = append(committed, false)
				lsn += 100
			case open && r < 5:
				i := len(txs) - 1
				s := tr.TrackOrdinal(txs[i], len(acked[i]), 1)
				acked[i] = append(acked[i], false)
				pending = append(pending, ev{i, s})
			case open && r < 6:
				i := len(txs) - 1
				committed[i] = true
				tr.Commit(txs[i], pglogrepl.LSN(1000+100*i+50))
			case len(pending) > 0:
				j := rng.Intn(len(pending))
				e := pending[j]
				pending[j] = pending[len(pending)-1]
				pending = pending[:len(pending)-1]
				txs[e.tx].AckSeq(e.seq, 1)
				acked[e.tx][int(e.seq)-firstSeq(txs[e.tx])] = true
			}
			check()
		}
	}
}

func firstSeq(tx *Txn) int {
	tx.t.mu.Lock()
	defer tx.t.mu.Unlock()
	return int(tx.firstSeq)
}

// NotifyAcks signals every step events of the head's prefix.
func TestNotifyAcks(t *testing.T) {
	tr := New(0, Limits{})
	kick := tr.NotifyAcks(100)
	tx := tr.BeginTx(time.Time{}, 1, 10)
	s := trackN(tr, tx, 0, 1000)
	signals := 0
	for _, q := range s {
		tx.AckSeq(q, 1)
		select {
		case <-kick:
			signals++
		default:
		}
	}
	if signals != 10 {
		t.Fatalf("%d signals for 1000 events at step 100, want 10", signals)
	}
}

// TestUnsavedAcksHoldWindow: with a saver (NotifyAcks), acknowledgements
// of the head transaction that no save covered yet hold window space, so
// what a crash re-sends stays within the window; Saved releases them.
// Without a saver nothing is held.
func TestUnsavedAcksHoldWindow(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 10})
	tr.NotifyAcks(4)
	tx := tr.BeginTx(time.Time{}, 1, 10)
	s := trackN(tr, tx, 0, 10)
	for _, q := range s[:6] {
		tx.AckSeq(q, 1)
	}
	if !tr.Full() {
		t.Fatal("4 unacknowledged + 6 unsaved acknowledgements: the window of 10 must be full")
	}
	tok := tr.Last().Token
	tx.AckSeq(s[6], 1) // after the snapshot: stays held
	tr.Saved(tok)
	select {
	case <-tr.Space():
	default:
		t.Fatal("Saved made room without signalling Space")
	}
	if tr.Full() {
		t.Fatal("after the save the window holds 3 unacknowledged + 1 unsaved: not full")
	}
	tr.Saved(SaveToken{}) // an attempt that knew nothing releases nothing
	for _, q := range s[7:] {
		tx.AckSeq(q, 1)
	}
	tr.Commit(tx, 20) // confirmed: nothing of it is held any more
	if tr.Full() {
		t.Fatal("a confirmed transaction still holds window space")
	}

	free := New(0, Limits{MaxEvents: 10})
	ftx := free.BeginTx(time.Time{}, 1, 10)
	for _, q := range trackN(free, ftx, 0, 10) {
		ftx.AckSeq(q, 1)
	}
	if free.Full() {
		t.Fatal("without a saver, acknowledgements must not hold window space")
	}
}

// TestSettleExtendsPartial: a restart settles the events its saved Partial
// names (prefix 0-2, then 5 and 7) and tracks the rest; its own
// acknowledgements then extend that Partial, the settled events take no
// window space, and the save token counts only this run's
// acknowledgements.
func TestSettleExtendsPartial(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 100})
	tr.NotifyAcks(50)
	tx := tr.BeginTx(time.Time{}, 1, 10)
	seqs := map[int]Seq{}
	for o := 0; o < 10; o++ {
		switch o {
		case 0, 1, 2, 5, 7:
			tr.Settle(tx, o)
		default:
			seqs[o] = tr.TrackOrdinal(tx, o, 1)
		}
	}
	if st := tr.Stats(); st.Events != 5 || st.Held != 0 {
		t.Fatalf("stats %+v: want the 5 tracked events in flight, none held", st)
	}
	wantPartial(t, tr, 10, 3)
	for _, o := range []int{4, 6, 8} {
		tx.AckSeq(seqs[o], 1)
	}
	a := tr.Last()
	want := Partial{CommitLSN: 10, Events: 3, Acked: []byte{0b111110}} // 4-8 past the unacknowledged 3
	if !a.Partial.Equal(want) {
		t.Fatalf("partial %+v, want %+v", a.Partial, want)
	}
	if a.Token.acks != 3 || a.Token.expressed != 3 {
		t.Fatalf("token %+v: want 3 acknowledgements, all in the Partial", a.Token)
	}
	if st := tr.Stats(); st.Held != 3 {
		t.Fatalf("held %d, want the 3 unsaved acknowledgements", st.Held)
	}
	tr.Saved(a.Token)
	if st := tr.Stats(); st.Held != 0 {
		t.Fatalf("held %d after the save", st.Held)
	}
	tx.AckSeq(seqs[3], 1)
	wantPartial(t, tr, 10, 9)
	tx.AckSeq(seqs[9], 1)
	tr.Commit(tx, 20)
	if tr.Flushed() != 20 || !tr.Idle() {
		t.Fatalf("flushed %s idle %v after the last acknowledgement", tr.Flushed(), tr.Idle())
	}
}

// TestHoldReleases: Saved releases only what the snapshot's Partial
// contained; SaveFailed releases every acknowledgement the snapshot
// counted and says how many; neither releases what came after.
func TestHoldReleases(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 100})
	tr.NotifyAcks(50)
	tx := tr.BeginTx(time.Time{}, 1, 10)
	s := trackN(tr, tx, 0, 10)
	for _, q := range s[:4] {
		tx.AckSeq(q, 1)
	}
	tok := tr.Last().Token
	tx.AckSeq(s[4], 1)
	tr.Saved(SaveToken{tx: tok.tx, acks: tok.acks, expressed: 2}) // a Partial that held only 2 of them
	if held := tr.Stats().Held; held != 3 {
		t.Fatalf("held %d, want 3 (2 not in the saved Partial, 1 after it)", held)
	}
	if n := tr.SaveFailed(tok); n != 2 {
		t.Fatalf("SaveFailed released %d, want the other 2 of the snapshot's 4", n)
	}
	if held := tr.Stats().Held; held != 1 {
		t.Fatalf("held %d, want the acknowledgement after the snapshot", held)
	}
	if n := tr.SaveFailed(tok); n != 0 {
		t.Fatalf("a second SaveFailed of the same snapshot released %d", n)
	}
}

// TestReachBoundsReading: with the hold on, the stream reads no event
// whose acknowledgement the ring could not record, however many events
// past the oldest unacknowledged one were acknowledged and saved; the
// oldest one's acknowledgement opens it again.
func TestReachBoundsReading(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 10})
	tr.NotifyAcks(5)
	tx := tr.BeginTx(time.Time{}, 1, 10)
	stuck := tr.TrackOrdinal(tx, 0, 1)
	n := 0
	for ; !tr.Full() && n < 1<<20; n++ {
		q := tr.TrackOrdinal(tx, n+1, 1)
		tx.AckSeq(q, 1)
		tr.Saved(tr.Last().Token)
	}
	if reach := int(tr.ring.mask); n != reach {
		t.Fatalf("read %d events past the stuck one before the window closed, want the ring's reach %d", n, reach)
	}
	if p := tr.Last().Partial; p.Known() != n {
		t.Fatalf("the Partial knows %d of the %d acknowledged events", p.Known(), n)
	}
	tx.AckSeq(stuck, 1)
	if tr.Full() {
		t.Fatal("still full after the oldest event was acknowledged")
	}
	free := New(0, Limits{MaxEvents: 10}) // no saver: nothing to bound
	ftx := free.BeginTx(time.Time{}, 1, 10)
	free.TrackOrdinal(ftx, 0, 1)
	for o := 1; o < 10000; o++ {
		ftx.AckSeq(free.TrackOrdinal(ftx, o, 1), 1)
	}
	if free.Full() {
		t.Fatal("without a saver the ring's reach must not close the window")
	}
}

// TestKickWhenHeadChanges: acknowledgements of a transaction behind the
// head hold nothing; when it becomes the head they do, and the saver is
// asked for a save at once.
func TestKickWhenHeadChanges(t *testing.T) {
	tr := New(0, Limits{MaxEvents: 100})
	kick := tr.NotifyAcks(10)
	a := tr.BeginTx(time.Time{}, 1, 10)
	first := tr.TrackOrdinal(a, 0, 1)
	tr.Commit(a, 20)
	b := tr.BeginTx(time.Time{}, 2, 30)
	for _, q := range trackN(tr, b, 0, 40) {
		b.AckSeq(q, 1)
	}
	select {
	case <-kick:
		t.Fatal("kicked for acknowledgements behind the head")
	default:
	}
	if held := tr.Stats().Held; held != 0 {
		t.Fatalf("held %d behind the head", held)
	}
	a.AckSeq(first, 1)
	select {
	case <-kick:
	default:
		t.Fatal("no kick when a transaction with 40 unsaved acknowledgements became the head")
	}
	if held := tr.Stats().Held; held != 40 {
		t.Fatalf("held %d, want 40", held)
	}
}
