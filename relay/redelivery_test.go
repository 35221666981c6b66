package relay

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/replication"
)

func TestDecodedMarkOnlyAdvances(t *testing.T) {
	var d decodedMark
	var wg sync.WaitGroup
	for i := 1; i <= 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d.advance(pglogrepl.LSN(i * 100))
		}(i)
	}
	wg.Wait()
	d.advance(10)
	if got := d.load(); got != 5000 {
		t.Fatalf("mark %d, want the highest, 5000", got)
	}
}

// TestDecodedMarkRebase: after a promotion (a stream on a new timeline)
// the mark of the old timeline is capped at the switch point, or dropped
// when the lineage does not describe its timeline; on the same timeline it
// stays.
func TestDecodedMarkRebase(t *testing.T) {
	ancestor := checkpoint.Lineage{Ancestor: true, Timeline: 1, End: 3000}
	cases := []struct {
		name string
		tli  int32
		lin  checkpoint.Lineage
		want pglogrepl.LSN
	}{
		{"same timeline", 1, checkpoint.Lineage{}, 5000},
		{"promoted: capped at the switch point", 2, ancestor, 3000},
		{"promoted: lineage of another timeline", 3, checkpoint.Lineage{Ancestor: true, Timeline: 2, End: 4000}, 0},
		{"promoted: no lineage (no checkpoint)", 2, checkpoint.Lineage{}, 0},
	}
	for _, c := range cases {
		var d decodedMark
		d.rebase(1, checkpoint.Lineage{})
		d.advance(5000)
		d.rebase(c.tli, c.lin)
		if got := d.load(); got != c.want {
			t.Errorf("%s: mark %s, want %s", c.name, got, c.want)
		}
	}
	var d decodedMark
	d.rebase(2, ancestor)
	d.advance(1000)
	d.rebase(2, ancestor)
	if got := d.load(); got != 1000 {
		t.Errorf("first stream, then the same timeline again: mark %s, want 0/3E8", got)
	}
}

func TestRedeliveryCountsUpToTheDecodedMark(t *testing.T) {
	cases := []struct {
		name      string
		prev, own pglogrepl.LSN
		want      int
	}{
		{"first start: nothing known", 0, 0, 0},
		// Transactions commit at 100, 200, ..., 600 (3 events each).
		{"saved by the earlier run", 350, 0, 9},          // 100, 200, 300
		{"this process's own earlier stream", 0, 201, 6}, // 100, 200
		{"the newer of both", 350, 501, 15},
		{"mark before everything", 50, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := metrics.New()
			d := newRedelivery(c.prev, c.own, slog.New(slog.DiscardHandler), m)
			if (d == nil) != (c.prev == 0 && c.own == 0) {
				t.Fatalf("counter %v for marks %d/%d", d, c.prev, c.own)
			}
			for lsn := pglogrepl.LSN(100); lsn <= 600; lsn += 100 {
				d.begin(replication.Begin{FinalLSN: lsn})
				for i := 0; i < 3; i++ {
					d.published()
				}
			}
			if got := testutil.ToFloat64(m.EventsRedelivered); got != float64(c.want) {
				t.Fatalf("redelivered %v, want %d", got, c.want)
			}
		})
	}
}
