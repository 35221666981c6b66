package deadletter

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// openRowDB answers the earliest-open-row query with one row of this
// system at lsn, with others open; any other call fails the test.
type openRowDB struct {
	noDB
	lsn pglogrepl.LSN
}

func (d openRowDB) QueryRow(context.Context, string, ...any) pgx.Row { return openRow(d) }

type openRow openRowDB

func (r openRow) Scan(dest ...any) error {
	*dest[0].(*string), *dest[1].(*string), *dest[2].(*int) = "p", r.lsn.String(), 0
	*dest[3].(*bool), *dest[4].(*bool) = false, true
	return nil
}

// passesAfter is a relay whose position passes everything once after
// has gone by since start.
type passesAfter struct {
	start time.Time
	after time.Duration
	reads int
}

func (p *passesAfter) Delivered(context.Context, pglogrepl.LSN) (Delivered, error) {
	p.reads++
	if time.Since(p.start) >= p.after {
		return Delivered{LSN: 0xFFFF_0000, From: "checkpoint"}, nil
	}
	return Delivered{LSN: 0x100, From: "checkpoint"}, nil
}

// The wait ends at the first poll that finds the position past the row,
// and at Wait otherwise, with the refusal; Wait 0 refuses without
// waiting.
func TestAwaitBehindTiming(t *testing.T) {
	agg := Aggregate{"order", "9"}
	synctest.Test(t, func(t *testing.T) {
		s := NewStore(openRowDB{noDB: noDB{t}, lsn: 0x500}, testTable)
		start := time.Now()
		p := &passesAfter{start: start, after: 10 * time.Second}
		waits := 0
		err := s.awaitBehind(t.Context(), agg, "", Guard{Progress: p, Wait: 30 * time.Second, OnWait: func(*AheadError) { waits++ }})
		if err != nil || time.Since(start) != 10*time.Second || waits != 1 || p.reads != 41 {
			t.Errorf("position passes after 10s: %v after %s, OnWait %d times, %d reads; want nil after 10s, 1, 41 (every 250ms)",
				err, time.Since(start), waits, p.reads)
		}

		start = time.Now()
		p = &passesAfter{start: start, after: time.Hour}
		err = s.awaitBehind(t.Context(), agg, "", Guard{Progress: p, Wait: 30 * time.Second, Poll: time.Second})
		var ahead *AheadError
		if !errors.As(err, &ahead) || ahead.Waited != 30*time.Second || time.Since(start) != 30*time.Second || ahead.EventID != "p" {
			t.Errorf("position never passes: %v after %s; want an *AheadError after 30s", err, time.Since(start))
		}

		start = time.Now()
		err = s.awaitBehind(t.Context(), agg, "", Guard{Progress: &passesAfter{start: start, after: time.Hour}})
		if !errors.As(err, &ahead) || ahead.Waited != 0 || time.Since(start) != 0 {
			t.Errorf("Wait 0: %v after %s; want an *AheadError at once", err, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		err = s.awaitBehind(ctx, agg, "", Guard{Progress: &passesAfter{start: time.Now(), after: time.Hour}, Wait: time.Minute})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled while waiting: %v", err)
		}
	})
}
