package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestSkipperPartial replays transactions committing at 100, 200, ..., 500
// with 10 events each and checks which events the skipper drops.
func TestSkipperPartial(t *testing.T) {
	cases := []struct {
		name    string
		before  pglogrepl.LSN
		partial checkpoint.Partial
		want    map[pglogrepl.LSN]int // transaction -> events skipped (its first ones)
	}{
		{"nothing saved", 0, checkpoint.Partial{}, nil},
		{"whole transactions only", 250, checkpoint.Partial{}, map[pglogrepl.LSN]int{100: 10, 200: 10}},
		{"prefix only (slot at the checkpoint)", 0, checkpoint.Partial{CommitLSN: 300, Events: 4},
			map[pglogrepl.LSN]int{300: 4}},
		{"slot fell back (PostgreSQL crash): whole transactions, then the prefix", 250,
			checkpoint.Partial{CommitLSN: 300, Events: 7}, map[pglogrepl.LSN]int{100: 10, 200: 10, 300: 7}},
		{"partial of the transaction at the checkpoint position", 300,
			checkpoint.Partial{CommitLSN: 300, Events: 2}, map[pglogrepl.LSN]int{100: 10, 200: 10, 300: 2}},
		{"partial never replayed: nothing else skipped", 0, checkpoint.Partial{CommitLSN: 250, Events: 5}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := metrics.New()
			k := resumeState{skipBefore: c.before, partial: c.partial}.skipper(slog.New(slog.DiscardHandler), m)
			got := map[pglogrepl.LSN]int{}
			total := 0
			for lsn := pglogrepl.LSN(100); lsn <= 500; lsn += 100 {
				k.begin(replication.Begin{FinalLSN: lsn})
				published := false
				for ord := 0; ord < 10; ord++ {
					if k.skipping(ord) != publish {
						if published {
							t.Fatalf("tx %d: ordinal %d skipped after a published one", lsn, ord)
						}
						got[lsn]++
						total++
					} else {
						published = true
					}
				}
			}
			if len(got) != len(c.want) {
				t.Fatalf("skipped %v, want %v", got, c.want)
			}
			for lsn, n := range c.want {
				if got[lsn] != n {
					t.Fatalf("skipped %v, want %v", got, c.want)
				}
			}
			if v := testutil.ToFloat64(m.CheckpointSkipped); v != float64(total) {
				t.Fatalf("metric %v, want %d", v, total)
			}
		})
	}
}

// The same commit LSN seen again later (a reconnect replays it with a
// fresh skipper; one skipper never applies a partial twice).
func TestSkipperPartialAppliesOnce(t *testing.T) {
	k := resumeState{partial: checkpoint.Partial{CommitLSN: 300, Events: 3}}.skipper(slog.New(slog.DiscardHandler), metrics.New())
	k.begin(replication.Begin{FinalLSN: 300})
	if k.skipping(2) != skipSettled || k.skipping(3) != publish {
		t.Fatal("prefix of 3 not applied")
	}
	k.begin(replication.Begin{FinalLSN: 400})
	if k.skipping(0) != publish {
		t.Fatal("the prefix leaked into the next transaction")
	}
	k.begin(replication.Begin{FinalLSN: 300})
	if k.skipping(0) != publish {
		t.Fatal("the partial was applied twice")
	}
}

// TestSkipperPartialPastPrefix: the events acknowledged past the prefix
// are skipped too, exactly those.
func TestSkipperPartialPastPrefix(t *testing.T) {
	// Prefix 0-2, then 4 and 6 (bits 1 and 3 past ordinal 3).
	p := checkpoint.Partial{CommitLSN: 300, Events: 3, Acked: []byte{0b1010}}
	k := resumeState{partial: p}.skipper(slog.New(slog.DiscardHandler), metrics.New())
	k.begin(replication.Begin{FinalLSN: 300})
	var skipped []int
	for ord := 0; ord < 10; ord++ {
		if k.skipping(ord) != publish {
			skipped = append(skipped, ord)
		}
	}
	if fmt.Sprint(skipped) != "[0 1 2 4 6]" {
		t.Fatalf("skipped %v, want [0 1 2 4 6]", skipped)
	}
}

// After a failover, a checkpoint of the old timeline is reported: applied
// (info) within the WAL the timelines share, a warning naming both
// positions and the switch point past it; nothing for one of the server's
// own timeline.
func TestLogLineage(t *testing.T) {
	id := checkpoint.Identity{SystemID: "7300000000000000001", Timeline: 2}
	anc := checkpoint.Lineage{Ancestor: true, Timeline: 1, End: 0x3000}
	cp := &checkpoint.Checkpoint{LSN: 0x2800, Identity: checkpoint.Identity{SystemID: id.SystemID, Timeline: 1}}
	past := &checkpoint.Checkpoint{LSN: 0x3800, Identity: cp.Identity}
	cases := []struct {
		name  string
		res   checkpoint.Resumption
		level string // "": nothing logged
		msg   string
		lsn   string
	}{
		{"same timeline", checkpoint.Resumption{Prev: &checkpoint.Checkpoint{LSN: 0x2800, Identity: id}}, "", "", ""},
		{"no checkpoint", checkpoint.Resumption{}, "", "", ""},
		{"ancestor, shared", checkpoint.Resumption{Prev: cp, Lineage: anc}, "INFO", "it applies here", "0/2800"},
		{"ancestor, past the switch point", checkpoint.Resumption{Diverged: past, Lineage: anc}, "WARN",
			"events committed past the switch point may have been published from the old primary although this timeline lacks them", "0/3800"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			r := &Relay{log: slog.New(slog.NewJSONHandler(&buf, nil))}
			r.logLineage(c.res, id, 0x2000)
			if c.level == "" {
				if buf.Len() != 0 {
					t.Fatalf("logged %s", buf.String())
				}
				return
			}
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("%v: %s", err, buf.String())
			}
			want := map[string]any{"level": c.level, "stage": "checkpoint", "checkpoint_lsn": c.lsn, "confirmed_flush_lsn": "0/2000",
				"switch_point": "0/3000", "checkpoint_timeline": 1.0, "timeline": 2.0}
			for k, v := range want {
				if rec[k] != v {
					t.Errorf("%s = %v, want %v", k, rec[k], v)
				}
			}
			if msg, _ := rec["msg"].(string); !strings.Contains(msg, c.msg) {
				t.Errorf("message %q lacks %q", msg, c.msg)
			}
		})
	}
}
