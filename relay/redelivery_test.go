package relay

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"

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
