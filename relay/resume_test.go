package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand"
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

// TestRestartsInsideOneTransaction drives the real skipper, sink and
// tracker through one 20,000-event transaction with three crashes in it:
// each run publishes on lanes of skewed speeds, saves what Last reports on
// kicks (as the saver does, keeping the union with the saved Partial;
// each save completes a while after its snapshot), and crashes part-way. What a restart re-sends of what Kafka
// already holds stays within the window for each restart, and the
// restarts make progress of their own (the saved Partial grows past what
// the first run saved).
func TestRestartsInsideOneTransaction(t *testing.T) {
	const (
		events   = 20000
		window   = 500
		lanes    = 6
		batch    = 50
		finalLSN = pglogrepl.LSN(0x10000)
	)
	rng := rand.New(rand.NewSource(26))
	inKafka := make([]bool, events)
	var saved checkpoint.Partial
	prevKnown := 0
	for run := 0; run < 4; run++ {
		last := run == 3
		tr := checkpoint.New(0x100, checkpoint.Limits{MaxEvents: window})
		kick := tr.NotifyAcks(kickStep(window))
		m := metrics.New()
		s := &sink{tracker: tr, m: m, skip: resumeState{partial: saved}.skipper(slog.New(slog.DiscardHandler), m)}
		if err := s.Begin(replication.Begin{FinalLSN: finalLSN, Xid: 7}); err != nil {
			t.Fatal(err)
		}
		type pub struct {
			ord int
			seq checkpoint.Seq
		}
		queues := make([][]pub, lanes)
		// A save takes a snapshot on a kick and completes some steps
		// later, while acknowledgements go on.
		var saving *checkpoint.Acked
		due := 0
		save := func() {
			a := *saving
			saving = nil
			if a.Partial.CommitLSN == saved.CommitLSN {
				saved = saved.Union(a.Partial)
			} else if !a.Partial.Empty() {
				saved = a.Partial
			}
			tr.Saved(a.Token)
		}
		resent, read, steps := 0, 0, 0
		crashAt := 2000 + rng.Intn(4000) // acknowledgements before the crash
		acks := 0
		for last || acks < crashAt {
			steps++
			if steps > 10_000_000 {
				t.Fatalf("run %d: no progress (read %d, full %v, stats %+v)", run, read, tr.Full(), tr.Stats())
			}
			if saving == nil {
				select {
				case <-kick:
					a := tr.Last()
					saving, due = &a, steps+rng.Intn(4000)
				default:
				}
			} else if steps >= due {
				save()
			}
			if read < events && !tr.Full() && rng.Intn(3) > 0 {
				o := read
				read++
				if s.skipped(o) {
					continue
				}
				if inKafka[o] {
					resent++
				}
				queues[o%lanes] = append(queues[o%lanes], pub{o, tr.TrackOrdinal(s.tx, o, 1)})
				continue
			}
			// Lane l is acknowledged with probability ~ 1/(l+1): skewed.
			l := rng.Intn(lanes)
			if rng.Intn(l+1) != 0 || len(queues[l]) == 0 {
				if read == events && tr.Stats().Events == 0 {
					break // everything acknowledged
				}
				continue
			}
			n := min(batch, len(queues[l]))
			for _, p := range queues[l][:n] {
				inKafka[p.ord] = true
				s.tx.AckSeq(p.seq, 1)
				acks++
			}
			queues[l] = queues[l][n:]
		}
		if held := tr.Stats().Held; held > window {
			t.Fatalf("run %d: %d acknowledgements held, over the window %d", run, held, window)
		}
		t.Logf("run %d: read %d, re-sent %d already in Kafka, saved Partial knows %d", run, read, resent, saved.Known())
		if run > 0 && resent > window {
			t.Errorf("restart %d re-sent %d events Kafka had, over the window %d", run, resent, window)
		}
		if run > 0 && !last && saved.Known() <= prevKnown {
			t.Errorf("run %d saved nothing past what the run before it saved (%d known)", run, saved.Known())
		}
		prevKnown = saved.Known()
		if last {
			if err := s.Commit(replication.Commit{EndLSN: finalLSN + 0x100}); err != nil {
				t.Fatal(err)
			}
			if tr.Flushed() != finalLSN+0x100 {
				t.Fatalf("flushed %s after every event was acknowledged", tr.Flushed())
			}
		}
		// What Kafka holds and no saved Partial knows is re-sent after
		// the crash: never more than the window.
		unsaved := 0
		for o, ok := range inKafka {
			if ok && !saved.Has(o) {
				unsaved++
			}
		}
		if !last && unsaved > window {
			t.Errorf("run %d: %d acknowledged events no save knows, over the window %d", run, unsaved, window)
		}
	}
	for o, ok := range inKafka {
		if !ok {
			t.Fatalf("event %d never reached Kafka", o)
		}
	}
}

// TestKickStepBelowWindow: the save kick comes before held
// acknowledgements can fill the window, whatever its size.
func TestKickStepBelowWindow(t *testing.T) {
	for w := 1; w <= 100_000; w++ {
		if s := kickStep(w); s < 1 || w > 1 && s > w/2 {
			t.Fatalf("window %d: kick step %d", w, s)
		}
	}
	if s := kickStep(10000); s != 1250 {
		t.Fatalf("default window: kick step %d, want 1250", s)
	}
}
