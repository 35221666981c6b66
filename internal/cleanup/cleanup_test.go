package cleanup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{OlderThan: time.Hour}.WithDefaults()
	if ok.BatchSize != DefaultBatchSize {
		t.Fatalf("default batch size %d", ok.BatchSize)
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	err := Options{OlderThan: 0, BatchSize: MaxBatchSize + 1, Pause: -time.Second, MaxDuration: -1}.Validate()
	for _, want := range []string{"Options.OlderThan 0s", "Options.BatchSize 10001", "Options.Pause -1s", "Options.MaxDuration -1ns"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate lacks %q: %v", want, err)
		}
	}
}

func TestUpperBound(t *testing.T) {
	for in, want := range map[string]string{
		"FOR VALUES FROM ('2026-12-01 00:00:00+00') TO ('2026-12-02 00:00:00+00')": "2026-12-02 00:00:00+00",
		"FOR VALUES FROM (MINVALUE) TO ('2026-12-02')":                             "2026-12-02",
		"FOR VALUES FROM ('a''b') TO ('c''d')":                                     "c'd",
	} {
		if got, ok := upperBound(in); !ok || got != want {
			t.Errorf("upperBound(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
	for _, in := range []string{"DEFAULT", "FOR VALUES FROM ('2026-12-01') TO (MAXVALUE)",
		"FOR VALUES FROM ('a', 1) TO ('b', 2)", "FOR VALUES IN ('x')", "FOR VALUES WITH (modulus 4, remainder 0)"} {
		if got, ok := upperBound(in); ok {
			t.Errorf("upperBound(%q) = %q, want not a single upper bound", in, got)
		}
	}
}

func TestEligibleCond(t *testing.T) {
	c := eligibleCond(migrations.Table{Schema: "app", Name: "outbox"}, "i")
	for _, want := range []string{"i.created_at < $1", "age(i.xmin) > age(($2::bigint % 4294967296)::text::xid)",
		`FROM "app"."outbox_dead_letter" d WHERE d.outbox_table = $3`, "d.aggregate_id = i.aggregate_id", "d.event_id = i.event_id::text",
		"i.event_id IS NOT NULL AND i.aggregate_id IS NOT NULL"} {
		if !strings.Contains(c, want) {
			t.Errorf("condition lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "o.") || strings.Contains(c, "DL") {
		t.Errorf("condition has a leftover placeholder:\n%s", c)
	}
}

// TestWalker: every page range is visited once, a range that fills a
// batch again, the pause follows only batches that deleted rows, and a
// deadline stops the walk between batches. It runs in a synctest bubble:
// the pauses are on the fake clock, which also times each visit.
func TestWalker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		left := map[int64]int64{0: 25, 10: 0, 20: 7, 30: 10} // rows per range start
		var visits []int64
		var at []time.Duration // when each visit began
		start := time.Now()
		w := walker{blocks: 35, span: 10, batch: 10, pause: time.Millisecond}
		err := w.run(context.Background(), func(_ context.Context, from, to int64) (int64, error) {
			if to-from != 10 {
				t.Fatalf("range %d-%d", from, to)
			}
			visits = append(visits, from)
			at = append(at, time.Since(start))
			n := min(left[from], 10)
			left[from] -= n
			return n, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{0, 0, 0, 10, 20, 30, 30}
		if len(visits) != len(want) {
			t.Fatalf("visits %v, want %v", visits, want)
		}
		for i := range want {
			if visits[i] != want[i] {
				t.Fatalf("visits %v, want %v", visits, want)
			}
		}
		for from, n := range left {
			if n != 0 {
				t.Errorf("range %d: %d rows left", from, n)
			}
		}
		// Deleted 10, 10, 5, 0, 7, 10, 0: a pause after each but the 0s.
		ms := time.Millisecond
		if wantAt := []time.Duration{0, ms, 2 * ms, 3 * ms, 3 * ms, 4 * ms, 5 * ms}; !slices.Equal(at, wantAt) {
			t.Errorf("visits began at %v, want %v", at, wantAt)
		}
		if d := time.Since(start); d != 5*ms {
			t.Errorf("walk took %v, want 5 pauses of 1ms", d)
		}

		ctx, cancel := context.WithCancel(context.Background())
		steps := 0
		err = walker{blocks: 1000, span: 1, batch: 5, pause: 0}.run(ctx, func(context.Context, int64, int64) (int64, error) {
			steps++
			if steps == 3 {
				cancel()
			}
			return 1, nil
		})
		if !errors.Is(err, context.Canceled) || steps != 3 {
			t.Fatalf("canceled walk: %v after %d steps, want context.Canceled after 3", err, steps)
		}
		boom := errors.New("boom")
		if err := (walker{blocks: 5, span: 1, batch: 5}).run(context.Background(), func(context.Context, int64, int64) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
			t.Fatalf("step error: %v", err)
		}
	})
}

func TestNoCheckpointErrorSaysHowToFix(t *testing.T) {
	err := (&NoCheckpointError{Slot: "s", Table: "public.outbox", Why: "has no checkpoint"}).Error()
	for _, want := range []string{"refused", `slot "s" has no checkpoint`, "outbox-relay run", "checkpoint show"} {
		if !strings.Contains(err, want) {
			t.Errorf("error lacks %q: %s", want, err)
		}
	}
}
