package checkpoint

import (
	"errors"
	"testing"

	"github.com/jackc/pglogrepl"
)

// After a failover to a promoted standby, a checkpoint of the old
// timeline applies like one of the new timeline when it is within the WAL
// they share; past the switch point it neither stops the relay nor skips
// anything.
func TestResumeAt(t *testing.T) {
	fence := &Fence{LSN: 0x700, Xmin: 70, Xmax: 75}
	base := Checkpoint{Slot: "s", LSN: 0x800, Xid: 8, Identity: testID, Fence: fence, Decoded: 0x900,
		Partial: Partial{CommitLSN: 0x880, Events: 3}}
	same := Lineage{}
	ancestor := func(end pglogrepl.LSN) Lineage { return Lineage{Ancestor: true, Timeline: 1, End: end} }
	cases := []struct {
		name              string
		lin               Lineage
		confirmed, walEnd pglogrepl.LSN
		prev              bool          // Prev returned
		skip              pglogrepl.LSN // SkipBefore
		decoded           pglogrepl.LSN // Prev.Decoded
		partial, diverged bool
	}{
		{"same timeline, slot behind", same, 0x600, 0x1000, true, 0x800, 0x900, true, false},
		{"same timeline, slot at the checkpoint", same, 0x800, 0x1000, true, 0, 0x900, true, false},
		{"ancestor, everything shared", ancestor(0x1000), 0x600, 0x1000, true, 0x800, 0x900, true, false},
		{"ancestor, decoded past the switch point", ancestor(0x890), 0x600, 0x1000, true, 0x800, 0x890, true, false},
		{"ancestor, partial's commit at the switch point", ancestor(0x880), 0x600, 0x1000, true, 0x800, 0x880, false, false},
		{"ancestor, checkpoint at the switch point", ancestor(0x800), 0x600, 0x1000, true, 0x800, 0x800, false, false},
		{"ancestor, slot at the checkpoint", ancestor(0x800), 0x800, 0x1000, true, 0, 0x800, false, false},
		{"ancestor, checkpoint past the switch point", ancestor(0x7ff), 0x600, 0x1000, false, 0, 0, false, true},
		// The new timeline's WAL may end before the old one's checkpoint:
		// not an AheadError, the checkpoint names other WAL here anyway.
		{"ancestor, past the switch point and the WAL end", ancestor(0x500), 0x400, 0x600, false, 0, 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := resumeAt(base, c.lin, c.confirmed, c.walEnd)
			if err != nil {
				t.Fatal(err)
			}
			if r.Lineage != c.lin || r.SkipBefore != c.skip || (r.Prev != nil) != c.prev || (r.Diverged != nil) != c.diverged {
				t.Fatalf("resumeAt = %+v", r)
			}
			if c.diverged && (r.Diverged.LSN != base.LSN || r.Diverged.Identity != testID) {
				t.Fatalf("Diverged = %+v", r.Diverged)
			}
			if !c.prev {
				return
			}
			p := r.Prev
			if p.LSN != base.LSN || p.Xid != 8 || p.Fence != fence || p.Identity != testID || p.Decoded != c.decoded || p.Partial.Empty() == c.partial {
				t.Fatalf("Prev = %+v", p)
			}
		})
	}
	if base.Decoded != 0x900 || base.Partial.Empty() {
		t.Fatal("resumeAt changed the caller's checkpoint")
	}
	// Past the WAL end on a shared position: refused as before.
	for _, lin := range []Lineage{same, ancestor(0x1000)} {
		_, err := resumeAt(base, lin, 0x600, 0x7ff)
		var ae *AheadError
		if !errors.As(err, &ae) || ae.Slot != "s" || ae.LSN != 0x800 || ae.WAL != 0x7ff {
			t.Fatalf("%+v: resumeAt past the WAL end = %v", lin, err)
		}
	}
	// An unknown decoded position stays unknown.
	bare := base
	bare.Decoded = 0
	if r, _ := resumeAt(bare, ancestor(0x1000), 0x600, 0); r.Prev.Decoded != 0 {
		t.Fatalf("Decoded = %s", r.Prev.Decoded)
	}
}
