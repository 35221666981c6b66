package checkpoint

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestDBCheck(t *testing.T) {
	e := newEmptyDBEnv(t)
	if err := e.store.Check(e.ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Check before migrating = %v", err)
	}
	if _, err := migrations.Apply(e.ctx, e.pool, e.tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Check(e.ctx); err != nil {
		t.Fatalf("Check = %v", err)
	}
	e.exec(t, `ALTER TABLE `+e.cpTable()+` DROP COLUMN partial_acked`)
	if err := e.store.Check(e.ctx); err == nil || !strings.Contains(err.Error(), "migration 5") {
		t.Fatalf("Check without partial_acked = %v", err)
	}
	e.exec(t, `ALTER TABLE `+e.cpTable()+` DROP COLUMN decoded_lsn`)
	if err := e.store.Check(e.ctx); err == nil || !strings.Contains(err.Error(), "migration 4") {
		t.Fatalf("Check without decoded_lsn = %v", err)
	}
}

// Everything saved comes back; a slot without a checkpoint says so.
func TestDBSaveLatestRoundTrip(t *testing.T) {
	e := newDBEnv(t)
	_, err := e.store.Latest(e.ctx)
	if !errors.Is(err, ErrCheckpointNotFound) || !strings.Contains(err.Error(), `"outbox_relay"`) {
		t.Fatalf("Latest of an empty table = %v", err)
	}
	before := time.Now().Add(-time.Minute)
	cp := Checkpoint{LSN: 0x16B3748, CommitTime: time.Date(2026, 12, 3, 10, 0, 0, 123000, time.UTC), Xid: 4000000000,
		Identity: testID, Fence: &Fence{LSN: 0x16B0000, Xmin: 5<<32 + 7, Xmax: 5<<32 + 9, At: time.Date(2026, 12, 3, 9, 59, 0, 0, time.UTC)},
		Decoded: 0x16C0000, Partial: Partial{CommitLSN: 0x16C8000, Events: 3, Acked: []byte{0b101}}}
	e.save(t, e.store, cp, 0)
	got := e.latest(t)
	if got.OutboxTable != e.tbl.String() || got.Slot != "outbox_relay" || got.LSN != cp.LSN || !got.CommitTime.Equal(cp.CommitTime) ||
		got.Xid != cp.Xid || got.Identity != testID || got.Decoded != cp.Decoded || !got.Partial.Equal(cp.Partial) ||
		got.Fence == nil || got.Fence.LSN != cp.Fence.LSN || got.Fence.Xmin != cp.Fence.Xmin || got.Fence.Xmax != cp.Fence.Xmax ||
		!got.Fence.At.Equal(cp.Fence.At) || got.StartedAt.Before(before) || got.SavedAt.Before(got.StartedAt) {
		t.Fatalf("Latest = %+v, saved %+v", got, cp)
	}
	if err := got.Verify(testID); err != nil {
		t.Fatal(err)
	}

	// A keepalive-only position: no transaction, no fence, no partial.
	other := NewStore(e.pool, e.tbl, "other_slot")
	e.save(t, other, Checkpoint{LSN: 0x10, Identity: testID}, 0)
	bare, err := other.Latest(e.ctx)
	if err != nil || bare.LSN != 0x10 || !bare.CommitTime.IsZero() || bare.Xid != 0 || bare.Fence != nil || bare.Decoded != 0 || !bare.Partial.Empty() {
		t.Fatalf("bare checkpoint = %+v, %v", bare, err)
	}
	if e.latest(t).LSN != cp.LSN {
		t.Fatal("a slot read another slot's checkpoint")
	}
	// A partial of acknowledgements past an empty prefix only.
	e.save(t, other, Checkpoint{LSN: 0x20, Identity: testID, Partial: Partial{CommitLSN: 0x30, Acked: []byte{0b10}}}, 0)
	if p, err := other.Latest(e.ctx); err != nil || !p.Partial.Equal(Partial{CommitLSN: 0x30, Acked: []byte{0b10}}) {
		t.Fatalf("partial without a prefix: %+v, %v", p.Partial, err)
	}
}

// Within a segment the newest row is updated in place: it keeps its first
// fence (valid for every later position), takes the newest transaction
// when one is known, never lowers decoded and replaces the partial.
func TestDBSaveUpdatesInPlace(t *testing.T) {
	e := newDBEnv(t)
	f1 := &Fence{LSN: 0x80, Xmin: 10, Xmax: 12, At: time.Unix(1000, 0)}
	f2 := &Fence{LSN: 0x180, Xmin: 20, Xmax: 22, At: time.Unix(2000, 0)}
	t1 := time.Unix(1100, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x100, CommitTime: t1, Xid: 11, Identity: testID, Decoded: 0x500,
		Partial: Partial{CommitLSN: 0x200, Events: 2}}, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x100, Identity: testID, Fence: f1, Decoded: 0x300}, 0) // fence came later
	e.save(t, e.store, Checkpoint{LSN: 0x200, Identity: testID, Fence: f2, Decoded: 0x400}, time.Second)
	if n := e.rows(t, "outbox_relay"); n != 1 {
		t.Fatalf("%d rows, want one updated in place", n)
	}
	got := e.latest(t)
	if got.LSN != 0x200 || got.Xid != 11 || !got.CommitTime.Equal(t1) || got.Decoded != 0x500 || !got.Partial.Empty() ||
		got.Fence == nil || got.Fence.LSN != f1.LSN || got.Fence.Xmin != f1.Xmin {
		t.Fatalf("Latest = %+v (fence %+v)", got, got.Fence)
	}
	t2 := time.Unix(1200, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x300, CommitTime: t2, Xid: 12, Identity: testID}, 0)
	if got := e.latest(t); got.Xid != 12 || !got.CommitTime.Equal(t2) || e.rows(t, "outbox_relay") != 1 {
		t.Fatalf("Latest = %+v", got)
	}
}

// A new row starts when the segment is over, the identity changed or the
// position went back (the old row stays as history); only then are rows
// older than the retention pruned, never another slot's.
func TestDBSaveNewRowsAndPrune(t *testing.T) {
	e := newDBEnv(t)
	other := NewStore(e.pool, e.tbl, "other_slot")
	e.save(t, other, Checkpoint{LSN: 0x50, Identity: testID}, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x100, Identity: testID}, 0)

	e.save(t, e.store, Checkpoint{LSN: 0x90, Identity: testID}, 0)
	if n := e.rows(t, "outbox_relay"); n != 2 || e.latest(t).LSN != 0x90 {
		t.Fatalf("a lower position: %d rows, latest %s", n, e.latest(t).LSN)
	}
	promoted := Identity{SystemID: testID.SystemID, Timeline: 2}
	e.save(t, e.store, Checkpoint{LSN: 0x200, Identity: promoted}, 0)
	if n := e.rows(t, "outbox_relay"); n != 3 || e.latest(t).Identity != promoted {
		t.Fatalf("another timeline: %d rows, latest %+v", n, e.latest(t))
	}
	e.save(t, e.store, Checkpoint{LSN: 0x300, Identity: promoted}, 0)
	if n := e.rows(t, "outbox_relay"); n != 3 {
		t.Fatalf("same segment: %d rows", n)
	}
	e.exec(t, `UPDATE `+e.cpTable()+` SET started_at = now() - interval '11 seconds'`)
	e.save(t, e.store, Checkpoint{LSN: 0x400, Identity: promoted}, 0)
	if n := e.rows(t, "outbox_relay"); n != 4 {
		t.Fatalf("after the segment: %d rows, want a new one", n)
	}

	// All four rows are two hours old; an update in place prunes nothing.
	e.age(t, 2*time.Hour)
	e.exec(t, `UPDATE `+e.cpTable()+` SET started_at = now() WHERE lsn = '0/400'`)
	e.save(t, e.store, Checkpoint{LSN: 0x500, Identity: promoted}, time.Hour)
	if n := e.rows(t, "outbox_relay"); n != 4 {
		t.Fatalf("an in-place update pruned: %d rows", n)
	}
	// Without a retention nothing is pruned.
	e.age(t, 20*time.Second)
	e.save(t, e.store, Checkpoint{LSN: 0x600, Identity: promoted}, 0)
	if n := e.rows(t, "outbox_relay"); n != 5 {
		t.Fatalf("retention 0 pruned: %d rows", n)
	}
	// The next new row prunes the rows saved before the retention (the
	// three two hours old), keeps the younger ones.
	e.age(t, 20*time.Second)
	e.save(t, e.store, Checkpoint{LSN: 0x700, Identity: promoted}, time.Hour)
	var lsns string
	if err := e.pool.QueryRow(e.ctx, `SELECT string_agg(lsn::text, ' ' ORDER BY id) FROM `+e.cpTable()+` WHERE slot = 'outbox_relay'`).Scan(&lsns); err != nil {
		t.Fatal(err)
	}
	if lsns != "0/500 0/600 0/700" {
		t.Fatalf("after pruning: rows at %s, want 0/500 0/600 0/700", lsns)
	}
	if n := e.rows(t, "other_slot"); n != 1 {
		t.Fatalf("pruning one slot removed another's rows: %d left", n)
	}
}

// After a failover to a promoted standby the relay saves on the new
// timeline while its synchronized slot lags the old primary's last
// checkpoint: the new timeline's rows are written (never merged into the
// old timeline's row, never refused as a step back) and Latest returns
// them, though their LSN is lower.
func TestDBSaveAfterTimelineSwitch(t *testing.T) {
	e := newDBEnv(t)
	f1 := &Fence{LSN: 0x300, Xmin: 30, Xmax: 31, At: time.Unix(3000, 0)}
	e.save(t, e.store, Checkpoint{LSN: 0x400, Xid: 4, Identity: testID, Fence: f1}, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x900, Xid: 9, Identity: testID}, 0) // the old primary's last save
	promoted := Identity{SystemID: testID.SystemID, Timeline: testID.Timeline + 1}

	// The relay resumed on the promoted standby from a checkpoint at 0x400
	// (the newest it replicated) and carries it over.
	prev := Checkpoint{LSN: 0x400, Xid: 4, Identity: testID, Fence: f1}
	src := &source{a: Acked{LSN: 0x200}}
	sv := NewSaver(SaverConfig{Store: e.store, DB: e.pool, Identity: promoted, Prev: &prev, Source: src.last, Interval: time.Hour}, WithLogger(testLogger(t)))
	if err := sv.Save(e.ctx, false); err != nil {
		t.Fatal(err)
	}
	got := e.latest(t)
	if got.Identity != promoted || got.LSN != 0x400 || got.Xid != 4 || got.Fence == nil || got.Fence.Xmin != 30 || e.rows(t, "outbox_relay") != 2 {
		t.Fatalf("after the switch: Latest = %+v, %d rows", got, e.rows(t, "outbox_relay"))
	}
	src.set(Acked{LSN: 0x500, Xid: 5})
	if err := sv.Save(e.ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := e.latest(t); got.Identity != promoted || got.LSN != 0x500 || got.Xid != 5 || e.rows(t, "outbox_relay") != 2 {
		t.Fatalf("next save: Latest = %+v, %d rows, want the new timeline's row updated in place", got, e.rows(t, "outbox_relay"))
	}
	// The old timeline's row is history, untouched.
	var lsn string
	var tli int32
	if err := e.pool.QueryRow(e.ctx, `SELECT lsn::text, timeline FROM `+e.cpTable()+` ORDER BY id LIMIT 1`).Scan(&lsn, &tli); err != nil {
		t.Fatal(err)
	}
	if lsn != "0/900" || tli != testID.Timeline {
		t.Fatalf("old timeline's row at %s on timeline %d", lsn, tli)
	}
	// A restart on the new timeline resumes from its own row.
	res, err := e.store.Resume(e.ctx, nil, promoted, 0x300, 0x1000)
	if err != nil || res.Prev == nil || res.Prev.LSN != 0x500 || res.Lineage.Ancestor || res.SkipBefore != 0x500 {
		t.Fatalf("Resume on the new timeline = %+v, %v", res, err)
	}
}

func TestDBReset(t *testing.T) {
	e := newDBEnv(t)
	other := NewStore(e.pool, e.tbl, "other_slot")
	e.save(t, other, Checkpoint{LSN: 0x50, Identity: testID}, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x100, Identity: testID}, 0)
	e.save(t, e.store, Checkpoint{LSN: 0x90, Identity: testID}, 0)
	n, err := e.store.Reset(e.ctx)
	if err != nil || n != 2 {
		t.Fatalf("Reset = %d, %v; want 2", n, err)
	}
	if _, err := e.store.Latest(e.ctx); !errors.Is(err, ErrCheckpointNotFound) {
		t.Fatalf("Latest after Reset = %v", err)
	}
	if e.rows(t, "other_slot") != 1 {
		t.Fatal("Reset removed another slot's checkpoint")
	}
}

// The history maps positions and times to fences of the same identity:
// the newest at or before, the oldest at or after.
func TestDBFences(t *testing.T) {
	e := newDBEnv(t)
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ins := func(slot string, id Identity, lsn pglogrepl.LSN, fence *Fence) {
		t.Helper()
		var flsn, at any
		var xmin, xmax any
		if fence != nil {
			flsn, xmin, xmax, at = fence.LSN.String(), int64(fence.Xmin), int64(fence.Xmax), fence.At
		}
		e.exec(t, `INSERT INTO `+e.cpTable()+` (outbox_table, slot, lsn, system_identifier, timeline, fence_lsn, fence_xmin,
			fence_xmax, fence_at) VALUES ($1, $2, $3::text::pg_lsn, $4, $5, $6::text::pg_lsn, $7, $8, $9)`,
			e.tbl.String(), slot, lsn.String(), id.SystemID, id.Timeline, flsn, xmin, xmax, at)
	}
	fence := func(lsn pglogrepl.LSN, xid uint64, at time.Time) *Fence {
		return &Fence{LSN: lsn, Xmin: xid, Xmax: xid + 2, At: at}
	}
	other := Identity{SystemID: "7300000000000000009", Timeline: 1}
	f100, f200, f300 := fence(0x100, 10, t0), fence(0x200, 20, t0.Add(time.Minute)), fence(0x300, 30, t0.Add(2*time.Minute))
	ins("outbox_relay", testID, 0x150, f100)
	ins("outbox_relay", testID, 0x310, f300) // rows need not be saved in fence order
	ins("outbox_relay", testID, 0x250, f200)
	ins("outbox_relay", testID, 0x400, nil)
	ins("outbox_relay", other, 0x260, fence(0x260, 26, t0.Add(90*time.Second)))
	ins("other_slot", testID, 0x270, fence(0x270, 27, t0.Add(100*time.Second)))

	check := func(name string, f Fence, ok bool, err error, want *Fence) {
		t.Helper()
		switch {
		case err != nil:
			t.Errorf("%s: %v", name, err)
		case ok != (want != nil):
			t.Errorf("%s: ok = %v, fence %+v; want %+v", name, ok, f, want)
		case ok && (f.LSN != want.LSN || f.Xmin != want.Xmin || f.Xmax != want.Xmax || !f.At.Equal(want.At)):
			t.Errorf("%s: fence %+v, want %+v", name, f, want)
		}
	}
	for _, c := range []struct {
		lsn    pglogrepl.LSN
		before *Fence
		after  *Fence
	}{
		{0x50, nil, f100},
		{0x100, f100, f100},
		{0x1ff, f100, f200},
		{0x280, f200, f300},
		{0x300, f300, f300},
		{0x500, f300, nil},
	} {
		f, ok, err := e.store.FenceBefore(e.ctx, testID, c.lsn)
		check("FenceBefore "+c.lsn.String(), f, ok, err, c.before)
		f, ok, err = e.store.FenceAfter(e.ctx, testID, c.lsn)
		check("FenceAfter "+c.lsn.String(), f, ok, err, c.after)
	}
	for _, c := range []struct {
		at   time.Time
		want *Fence
	}{
		{t0.Add(-time.Second), nil},
		{t0, f100},
		{t0.Add(119 * time.Second), f200},
		{t0.Add(time.Hour), f300},
	} {
		f, ok, err := e.store.FenceBeforeTime(e.ctx, testID, c.at)
		check("FenceBeforeTime "+c.at.Format(time.TimeOnly), f, ok, err, c.want)
	}
	// Commit order, not the text's: 0/FFFFFF0 < 0/10000010 (the text of
	// the second sorts first). Ordering by fence_lsn once meant the text
	// output column of that name.
	fA, fB := fence(0xFFFFFF0, 40, t0.Add(3*time.Minute)), fence(0x10000010, 50, t0.Add(4*time.Minute))
	ins("outbox_relay", testID, 0xFFFFFF8, fA)
	ins("outbox_relay", testID, 0x10000018, fB)
	f, ok, err := e.store.FenceBefore(e.ctx, testID, 0x20000000)
	check("FenceBefore across LSN digits", f, ok, err, fB)
	f, ok, err = e.store.FenceAfter(e.ctx, testID, 0x400)
	check("FenceAfter across LSN digits", f, ok, err, fA)
	// Another identity's history holds only its own fence.
	f, ok, err = e.store.FenceBefore(e.ctx, other, 0x1000)
	check("FenceBefore of another identity", f, ok, err, fence(0x260, 26, t0.Add(90*time.Second)))
	f, ok, err = e.store.FenceAfter(e.ctx, other, 0x261)
	check("FenceAfter of another identity", f, ok, err, nil)
}

// Resume: a checkpoint ahead of the slot is skipped to; one of another
// identity or past the server's WAL is refused. (A checkpoint of the
// server's own identity, or of another system, needs no replication
// connection: conn is nil.)
func TestDBResume(t *testing.T) {
	e := newDBEnv(t)
	res, err := e.store.Resume(e.ctx, nil, testID, 0x100, 0x1000)
	if res != (Resumption{}) || err != nil {
		t.Fatalf("Resume without a checkpoint = %+v, %v", res, err)
	}
	e.save(t, e.store, Checkpoint{LSN: 0x500, Xid: 5, Identity: testID}, 0)
	for _, c := range []struct {
		confirmed, walEnd, skip pglogrepl.LSN
	}{
		{0x400, 0x1000, 0x500}, // the slot lags the checkpoint
		{0x500, 0x1000, 0},
		{0x600, 0x1000, 0},
		{0x400, 0x500, 0x500}, // at the WAL end
		{0x400, 0, 0x500},     // WAL end unknown
	} {
		res, err := e.store.Resume(e.ctx, nil, testID, c.confirmed, c.walEnd)
		if err != nil || res.Prev == nil || res.Prev.LSN != 0x500 || res.Prev.Xid != 5 || res.SkipBefore != c.skip || res.Diverged != nil || res.Lineage.Ancestor {
			t.Errorf("Resume(confirmed %s, WAL %s) = %+v, %v; want skip %s", c.confirmed, c.walEnd, res, err, c.skip)
		}
	}
	_, err = e.store.Resume(e.ctx, nil, testID, 0x100, 0x4ff)
	var ae *AheadError
	if !errors.As(err, &ae) || ae.LSN != 0x500 || ae.WAL != 0x4ff || ae.Slot != "outbox_relay" {
		t.Fatalf("Resume past the WAL = %v", err)
	}
	// Another cluster: refused before anything else is compared.
	restored := Identity{SystemID: "7300000000000000009", Timeline: 1}
	res, err = e.store.Resume(e.ctx, nil, restored, 0x100, 0x4ff)
	var me *MismatchError
	if !errors.As(err, &me) || me.Saved != testID || me.Current != restored || res != (Resumption{}) {
		t.Fatalf("Resume on another cluster = %+v, %v", res, err)
	}
	// A later timeline of the checkpoint's system: its history is read on
	// the replication connection, here one to the stack's server, which
	// has no timeline 1000, so the read fails and Resume says so.
	promoted := Identity{SystemID: testID.SystemID, Timeline: 1000}
	if _, err = e.store.Resume(e.ctx, e.replConn(t), promoted, 0x100, 0x1000); err == nil || !strings.Contains(err.Error(), "TIMELINE_HISTORY 1000") {
		t.Fatalf("Resume on timeline 1000 without its history = %v", err)
	}
}

// A fence taken against the server bounds the xids: a transaction that
// committed before it has xid < Xmax, one running across it xid >= Xmin,
// one that starts after it xid >= Xmax. (A transaction running across the
// fence may have xid >= Xmax too: Xmax is one past the newest completed
// xid, not the next one to be assigned.)
func TestDBCaptureFence(t *testing.T) {
	e := newDBEnv(t)
	var committed uint64
	if err := e.pool.QueryRow(e.ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	tx, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(e.ctx)
	var running uint64
	if err := tx.QueryRow(e.ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	f, err := CaptureFence(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	var later uint64
	var wal string
	if err := e.pool.QueryRow(e.ctx, `SELECT pg_current_xact_id()::text::bigint, pg_current_wal_insert_lsn()::text`).Scan(&later, &wal); err != nil {
		t.Fatal(err)
	}
	end, _ := pglogrepl.ParseLSN(wal)
	if f.Xmin > running || committed >= f.Xmax || later < f.Xmax || f.Xmin > f.Xmax {
		t.Fatalf("fence %+v: committed xid %d, running xid %d, later xid %d", f, committed, running, later)
	}
	if f.LSN == 0 || f.LSN > end || f.At.Before(before) || f.At.After(time.Now()) {
		t.Fatalf("fence %+v, WAL at %s", f, end)
	}
}

// Identify names the server a checkpoint belongs to: the system identifier
// pg_control holds and the current timeline.
func TestDBIdentify(t *testing.T) {
	e := newDBEnv(t)
	cfg := e.pool.Config().ConnConfig.Config.Copy()
	plain, err := pgconn.ConnectConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(e.ctx)
	if _, _, err := Identify(e.ctx, plain); err == nil || !strings.Contains(err.Error(), "IDENTIFY_SYSTEM") {
		t.Fatalf("Identify on a plain connection = %v", err)
	}
	id, pos, err := Identify(e.ctx, e.replConn(t))
	if err != nil {
		t.Fatal(err)
	}
	var system string
	if err := e.pool.QueryRow(e.ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&system); err != nil {
		t.Fatal(err)
	}
	if id.SystemID != system || id.Timeline < 1 || pos == 0 {
		t.Fatalf("Identify = %+v at %s; pg_control says system %s", id, pos, system)
	}
}
