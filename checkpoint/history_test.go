package checkpoint

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

// What PostgreSQL writes (writeTimeLineHistory: the parent's lines, then
// "parent\tX/X\treason"), and what its reader tolerates, parses into the
// ancestors in order.
func TestParseHistory(t *testing.T) {
	cases := []struct {
		name     string
		timeline int32
		content  string
		want     []Switch
	}{
		{"promotion", 2, "1\t0/5000060\tno recovery target specified\n",
			[]Switch{{1, 0x5000060, "no recovery target specified"}}},
		{"two promotions", 3, "1\t0/5000060\tno recovery target specified\n\n2\t1/A0000D8\tno recovery target specified\n",
			[]Switch{{1, 0x5000060, "no recovery target specified"}, {2, 0x10A0000D8, "no recovery target specified"}}},
		{"a skipped timeline (restored from timeline 2's ancestor)", 5, "1\t0/3000000\tbefore 2026-01-01 00:00:00+00\n4\t0/4000000\tat restore point \"x\"\n",
			[]Switch{{1, 0x3000000, "before 2026-01-01 00:00:00+00"}, {4, 0x4000000, `at restore point "x"`}}},
		{"no reason, no trailing newline, comments, CRLF, indentation", 4,
			"# written by hand\r\n  1\t0/10\r\n\t# another\n2\t0/20\tpromoted\tby hand\n3\tFFFFFFFF/FFFFFFFF",
			[]Switch{{1, 0x10, ""}, {2, 0x20, "promoted\tby hand"}, {3, 0xFFFFFFFFFFFFFFFF, ""}}},
		{"empty: no ancestors", 2, "", nil},
		{"only comments", 7, "# nothing\n\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := ParseHistory(c.timeline, []byte(c.content))
			if err != nil {
				t.Fatal(err)
			}
			if h.Timeline != c.timeline || !reflect.DeepEqual(h.Switches, c.want) {
				t.Fatalf("ParseHistory = %+v, want timeline %d %+v", h, c.timeline, c.want)
			}
		})
	}
}

// Anything else is an error naming the line and what is wrong with it.
func TestParseHistoryErrors(t *testing.T) {
	cases := []struct {
		name     string
		timeline int32
		content  string
		want     string
	}{
		{"timeline 0", 0, "", "invalid timeline"},
		{"negative timeline", -2, "", "invalid timeline"},
		{"no tab", 2, "1 0/10 reason\n", `line 1 "1 0/10 reason": want a timeline, a tab and a switch point`},
		{"no switch point", 2, "1\n", "want a timeline, a tab and a switch point"},
		{"empty switch point", 2, "1\t\treason\n", `invalid switch point ""`},
		{"switch point without slash", 2, "1\t5000060\n", `invalid switch point "5000060"`},
		{"switch point not hex", 2, "1\t0/50G0060\n", `invalid switch point "0/50G0060"`},
		{"switch point half too large", 2, "1\t100000000/0\n", "invalid switch point"},
		{"switch point with trailing text", 2, "1\t0/10x\n", `invalid switch point "0/10x"`},
		{"timeline not a number", 2, "one\t0/10\n", `invalid timeline "one"`},
		{"timeline zero", 2, "0\t0/10\n", `invalid timeline "0"`},
		{"timeline negative", 2, "-1\t0/10\n", `invalid timeline "-1"`},
		{"timeline past int32", 2, "2147483648\t0/10\n", `invalid timeline "2147483648"`},
		{"ancestor not below", 2, "2\t0/10\n", "ancestor timeline 2 is not below 2"},
		{"ancestor above", 3, "1\t0/10\n4\t0/20\n", `line 2 "4\t0/20": ancestor timeline 4 is not below 3`},
		{"timelines out of order", 4, "2\t0/10\n1\t0/20\n", "timeline 1 does not follow timeline 2"},
		{"timeline repeated", 4, "1\t0/10\n1\t0/20\n", "timeline 1 does not follow timeline 1"},
		{"line number counts skipped lines", 4, "# c\n\n1\t0/10\nx\n", `line 4 "x"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, err := ParseHistory(c.timeline, []byte(c.content))
			if err == nil {
				t.Fatalf("ParseHistory = %+v, want an error", h)
			}
			if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), fmt.Sprintf("history of timeline %d", c.timeline)) {
				t.Fatalf("error %q lacks %q", err, c.want)
			}
		})
	}
}

// End and Shares: the WAL of an ancestor is this timeline's up to where it
// ended, and no further; a timeline that is not an ancestor shares none.
func TestHistoryShares(t *testing.T) {
	h := History{Timeline: 4, Switches: []Switch{{1, 0x1000, ""}, {2, 0x3000, ""}, {3, 0x5000, ""}}}
	for _, c := range []struct {
		timeline int32
		lsn      pglogrepl.LSN
		end      pglogrepl.LSN
		ancestor bool
		shares   bool
	}{
		{1, 0x0fff, 0x1000, true, true},
		{1, 0x1000, 0x1000, true, true}, // a transaction ending at the switch point is complete on both
		{1, 0x1001, 0x1000, true, false},
		{2, 0x2000, 0x3000, true, true},
		{2, 0x3001, 0x3000, true, false},
		{3, 0x5000, 0x5000, true, true},
		{4, 0x9000, 0, false, true}, // the timeline itself
		{5, 0x10, 0, false, false},  // a later timeline
		{0, 0x10, 0, false, false},
	} {
		end, ok := h.End(c.timeline)
		if end != c.end || ok != c.ancestor {
			t.Errorf("End(%d) = %s, %v; want %s, %v", c.timeline, end, ok, c.end, c.ancestor)
		}
		if got := h.Shares(c.timeline, c.lsn); got != c.shares {
			t.Errorf("Shares(%d, %s) = %v, want %v", c.timeline, c.lsn, got, c.shares)
		}
	}
	// A recovery that stopped on timeline 1 before timeline 2 began, with
	// timeline 2 as its target: timeline 3 shares timeline 1's WAL only up
	// to where it left timeline 2's line, 0x800.
	pitr := History{Timeline: 3, Switches: []Switch{{1, 0x1000, ""}, {2, 0x800, ""}}}
	if end, ok := pitr.End(1); !ok || end != 0x800 || pitr.Shares(1, 0x900) || !pitr.Shares(1, 0x800) {
		t.Fatalf("End(1) of %+v = %s, %v", pitr, end, ok)
	}
	// Timeline 1 has no history: only itself.
	if one := (History{Timeline: 1}); !one.Shares(1, 0x10) || one.Shares(2, 0x10) {
		t.Fatal("timeline 1")
	}
}

// Whatever the bytes, ParseHistory either fails or returns ancestors in
// increasing order below the timeline, and parses the lines it printed
// back to the same history.
func FuzzParseHistory(f *testing.F) {
	for _, s := range []string{"1\t0/5000060\tno recovery target specified\n", "1\t0/10\n2\t0/20\n", "# x\n\n", "1\t0/10x", "2\t0/10\n1\t0/20\n", "1\t\t"} {
		f.Add(int32(3), []byte(s))
	}
	f.Fuzz(func(t *testing.T, timeline int32, content []byte) {
		h, err := ParseHistory(timeline, content)
		if err != nil {
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("history of timeline %d", timeline)) {
				t.Fatalf("error %q does not name the timeline", err)
			}
			return
		}
		var b strings.Builder
		prev := int32(0)
		for _, sw := range h.Switches {
			if sw.Timeline <= prev || sw.Timeline >= timeline {
				t.Fatalf("%+v: ancestors out of order", h)
			}
			prev = sw.Timeline
			if end, ok := h.End(sw.Timeline); !ok || end > sw.End {
				t.Fatalf("%+v: End(%d) = %s, %v", h, sw.Timeline, end, ok)
			}
			fmt.Fprintf(&b, "%d\t%s\t%s\n", sw.Timeline, sw.End, sw.Reason)
		}
		again, err := ParseHistory(timeline, []byte(b.String()))
		if err != nil || !reflect.DeepEqual(again.Switches, h.Switches) {
			t.Fatalf("reparsing %q: %+v, %v; want %+v", b.String(), again, err, h)
		}
	})
}
