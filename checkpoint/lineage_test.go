package checkpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The rule of the package documentation: the server's own identity, or an
// ancestor timeline of the same system, is related; another system, a
// sibling branch or a later timeline is refused with a *MismatchError.
func TestLineage(t *testing.T) {
	sys := "7300000000000000001"
	on := func(tli int32) Identity { return Identity{SystemID: sys, Timeline: tli} }
	// Timeline 4 descends from 1 and 3; 2 was a sibling branch of 1.
	h4 := History{Timeline: 4, Switches: []Switch{{1, 0x1000, ""}, {3, 0x4000, ""}}}
	cases := []struct {
		name    string
		saved   Identity
		server  Identity
		h       History
		want    Lineage
		refused string // "": related
	}{
		{"same identity", on(4), on(4), h4, Lineage{}, ""},
		{"same identity, no history read", on(4), on(4), History{}, Lineage{}, ""},
		{"parent", on(3), on(4), h4, Lineage{Ancestor: true, Timeline: 3, End: 0x4000}, ""},
		{"grandparent", on(1), on(4), h4, Lineage{Ancestor: true, Timeline: 1, End: 0x1000}, ""},
		{"sibling branch", on(2), on(4), h4, Lineage{}, "another timeline"},
		{"later timeline", on(5), on(4), h4, Lineage{}, "another timeline"},
		{"earlier timeline, history unknown", on(3), on(4), History{}, Lineage{}, "another timeline"},
		{"another system", Identity{SystemID: "7300000000000000009", Timeline: 3}, on(4), h4, Lineage{}, "another system identifier"},
		{"another system, same timeline", Identity{SystemID: "7300000000000000009", Timeline: 4}, on(4), h4, Lineage{}, "another system identifier"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cp := Checkpoint{Slot: "s", LSN: 0x800, Identity: c.saved}
			got, err := cp.Lineage(c.server, c.h)
			if c.refused == "" {
				if err != nil || got != c.want {
					t.Fatalf("Lineage = %+v, %v; want %+v", got, err, c.want)
				}
				return
			}
			var me *MismatchError
			if !errors.As(err, &me) || me.Saved != c.saved || me.Current != c.server || got != (Lineage{}) {
				t.Fatalf("Lineage = %+v, %v; want a *MismatchError", got, err)
			}
			// The text is Verify's, unchanged.
			if verr := cp.Verify(c.server); err.Error() != verr.Error() || !strings.Contains(err.Error(), c.refused) {
				t.Fatalf("error %q, Verify says %q, want %q", err, verr, c.refused)
			}
		})
	}
	// A history of another timeline than the server's is a caller's
	// mistake, not a verdict on the checkpoint.
	cp := Checkpoint{Slot: "s", LSN: 0x800, Identity: on(3)}
	var me *MismatchError
	if _, err := cp.Lineage(on(5), h4); err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "history read is of timeline 4") {
		t.Fatalf("Lineage with timeline 4's history on timeline 5 = %v", err)
	}
}

func TestLineageShares(t *testing.T) {
	same := Lineage{}
	anc := Lineage{Ancestor: true, Timeline: 1, End: 0x1000}
	if !same.Shares(0xFFFFFFFF) || !anc.Shares(0x1000) || anc.Shares(0x1001) {
		t.Fatal("Shares")
	}
}

// Trace reads the history only for an earlier timeline of the same
// system: every other case is decided without the connection (nil here,
// which would panic if used).
func TestTraceWithoutHistory(t *testing.T) {
	sys := "7300000000000000001"
	for _, c := range []struct {
		saved, server Identity
		refused       bool
	}{
		{Identity{sys, 2}, Identity{sys, 2}, false},
		{Identity{sys, 3}, Identity{sys, 2}, true},
		{Identity{"1", 1}, Identity{sys, 2}, true},
		{Identity{sys, 0}, Identity{sys, 2}, true},
	} {
		_, err := Checkpoint{Identity: c.saved}.Trace(context.Background(), nil, c.server)
		if (err != nil) != c.refused {
			t.Errorf("Trace(%s on %s) = %v", c.saved, c.server, err)
		}
	}
}
