package recovery

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// window against saved checkpoints: the newest one's fence bounds the
// back-fill when it holds on this server, which after a failover to a
// promoted standby includes a checkpoint of the old timeline whose fence is
// within the WAL both timelines share (xids are the same transactions
// there). Otherwise --since or --all is asked for.
func TestWindow(t *testing.T) {
	s := testenv.Reserve(t)
	tbl := migrations.Table{Schema: s.Schema, Name: "outbox"}
	if _, err := migrations.Apply(s.Ctx, s.Pool, tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	const sys = "7300000000000000001"
	on := func(tli int32) checkpoint.Identity { return checkpoint.Identity{SystemID: sys, Timeline: tli} }
	server := on(3)
	// Timeline 3 descends from 1 (ended at 0/1000) and 2 (ended at 0/3000).
	history := checkpoint.History{Timeline: 3, Switches: []checkpoint.Switch{{Timeline: 1, End: 0x1000}, {Timeline: 2, End: 0x3000}}}
	trace := func(cp checkpoint.Checkpoint) (checkpoint.Lineage, error) { return cp.Lineage(server, history) }
	fence := func(lsn pglogrepl.LSN, xmin uint64) *checkpoint.Fence {
		return &checkpoint.Fence{LSN: lsn, Xmin: xmin, Xmax: xmin + 1, At: time.Now().Add(-time.Minute)}
	}
	cases := []struct {
		name    string
		saved   *checkpoint.Checkpoint // nil: none
		from    uint64                 // the window's FromXid; 0: an error
		desc    string                 // in the description, or in the error
		foreign bool
	}{
		{"no checkpoint", nil, 0, "pass --since TIME (when the slot was last healthy) or --all", false},
		{"this timeline", &checkpoint.Checkpoint{LSN: 0x5000, Identity: server, Fence: fence(0x4800, 48)}, 48,
			"since checkpoint 0/5000 (xid >= 48, fence at 0/4800)", false},
		{"no fence", &checkpoint.Checkpoint{LSN: 0x5000, Identity: server}, 0, "has no fence", false},
		{"parent timeline, within the shared WAL", &checkpoint.Checkpoint{LSN: 0x2800, Identity: on(2), Fence: fence(0x2000, 20)}, 20,
			"since checkpoint 0/2800 (xid >= 20, fence at 0/2000), saved on timeline 2, which this server's timeline 3 descends from (it ended at 0/3000)", false},
		{"grandparent timeline, fence at the switch point", &checkpoint.Checkpoint{LSN: 0x1000, Identity: on(1), Fence: fence(0x1000, 10)}, 10,
			"saved on timeline 1", false},
		// The relay confirmed WAL the standby never received, but the fence
		// is before the switch point: its bound still holds.
		{"parent timeline, position past the switch point, fence before it", &checkpoint.Checkpoint{LSN: 0x3800, Identity: on(2), Fence: fence(0x2f00, 29)}, 29,
			"fence at 0/2F00", false},
		{"parent timeline, fence past the switch point", &checkpoint.Checkpoint{LSN: 0x3800, Identity: on(2), Fence: fence(0x3100, 31)}, 0,
			"checkpoint at 0/3800 was saved on timeline 2, which this server's timeline 3 shares only up to 0/3000, and its fence at 0/3100 is past that, so its xid bound does not hold here: pass --since TIME or --all", false},
		{"another system", &checkpoint.Checkpoint{LSN: 0x2800, Identity: checkpoint.Identity{SystemID: "7300000000000000009", Timeline: 2}, Fence: fence(0x2000, 20)}, 0,
			"another system identifier", true},
		{"a later timeline", &checkpoint.Checkpoint{LSN: 0x800, Identity: on(4), Fence: fence(0x700, 7)}, 0, "another timeline", true},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := checkpoint.NewStore(s.Pool, tbl, fmt.Sprintf("slot_%d", i))
			if c.saved != nil {
				if err := store.Save(s.Ctx, *c.saved, 0); err != nil {
					t.Fatal(err)
				}
			}
			w, desc, foreign, err := selection(s.Ctx, store, server, trace, time.Time{}, false, false)
			if c.from == 0 {
				if err == nil || !strings.Contains(err.Error(), c.desc) {
					t.Fatalf("window = %+v, %q, %v; want an error saying %q", w, desc, err, c.desc)
				}
				var me *checkpoint.MismatchError
				if errors.As(err, &me) != c.foreign || c.foreign && !strings.Contains(err.Error(), "pass --since TIME or --all") {
					t.Fatalf("error %v: a *MismatchError is %v", err, c.foreign)
				}
			} else if err != nil || w.FromXid == nil || *w.FromXid != c.from || !strings.Contains(desc, c.desc) || foreign {
				t.Fatalf("window = %+v, %q, %v, %v; want xid >= %d, %q", w, desc, foreign, err, c.from, c.desc)
			}
			// --since decides the start; only a refused checkpoint is foreign
			// (reset after the back-fill).
			since := time.Now().Add(-time.Hour)
			w, desc, foreign, err = selection(s.Ctx, store, server, trace, since, false, true)
			if err != nil || !w.Since.Equal(since) || foreign != c.foreign || !strings.Contains(desc, "commit timestamps") {
				t.Fatalf("window --since = %+v, %q, %v, %v; want foreign %v", w, desc, foreign, err, c.foreign)
			}
			// --all needs no checkpoint.
			if w, desc, foreign, err := selection(s.Ctx, store, server, trace, time.Time{}, true, false); err != nil || w.FromXid != nil || foreign || desc != "every row in the table" {
				t.Fatalf("window --all = %+v, %q, %v, %v", w, desc, foreign, err)
			}
		})
	}
	// The timeline history could not be read: said, not taken for a refusal.
	store := checkpoint.NewStore(s.Pool, tbl, "slot_history")
	if err := store.Save(s.Ctx, checkpoint.Checkpoint{LSN: 0x800, Identity: on(2), Fence: fence(0x700, 7)}, 0); err != nil {
		t.Fatal(err)
	}
	broken := errors.New("TIMELINE_HISTORY 3: no such file")
	failing := func(checkpoint.Checkpoint) (checkpoint.Lineage, error) { return checkpoint.Lineage{}, broken }
	for _, since := range []time.Time{{}, time.Now()} {
		if _, _, _, err := selection(s.Ctx, store, server, failing, since, false, true); !errors.Is(err, broken) {
			t.Fatalf("window with an unreadable history (since %v) = %v", since, err)
		}
	}
}
