package deadletter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// writer fails the events named in fail.
type writer struct {
	fail    map[string]bool
	written []string
}

func (w *writer) Write(_ context.Context, ev *replication.WALEvent) error {
	if w.fail[ev.EventID] {
		return errors.New("still too large")
	}
	w.written = append(w.written, ev.EventID)
	return nil
}

// TestFindAndRetryAgainstStack: a target resolves by event or by
// aggregate id (refusing an ambiguous one); a retry re-publishes the
// aggregate's open rows in order and stops at the first that still fails.
func TestFindAndRetryAgainstStack(t *testing.T) {
	pool := testenv.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table, err := migrations.ParseTable(testenv.Schema(t, pool, "deadletter") + ".outbox")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for i, r := range []struct{ id, typ, agg, status string }{
		{"e-1", "order", "o-1", StatusDead}, {"e-2", "order", "o-1", StatusParked}, {"e-3", "order", "o-1", StatusParked},
		{"e-4", "order", "shared", StatusDead}, {"e-5", "invoice", "shared", StatusDead},
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO `+migrations.DeadLetterTable(table).Quoted()+` (outbox_table, event_id, aggregate_type,
			aggregate_id, aggregate_version, event_type, schema_version, payload, tx_lsn, tx_ordinal, status, reason, class)
			VALUES ($1, $2, $3, $4, $5::bigint, 'x.happened', 1, '{}', '0/100', $5::int, $6, 'test', 'test')`,
			table.String(), r.id, r.typ, r.agg, i+1, r.status); err != nil {
			t.Fatal(err)
		}
	}
	s := NewStore(pool, table)
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	order1 := Aggregate{Type: "order", ID: "o-1"}
	for _, tc := range []struct {
		target Target
		want   Aggregate
		err    error
	}{
		{Target{EventID: "e-2"}, order1, nil},
		{Target{AggregateID: "o-1"}, order1, nil},
		{Target{AggregateID: "shared", AggregateType: "invoice"}, Aggregate{Type: "invoice", ID: "shared"}, nil},
		{Target{AggregateID: "shared"}, Aggregate{}, ErrAmbiguous},
		{Target{AggregateID: "none"}, Aggregate{}, ErrEntryNotFound},
		{Target{EventID: "e-9"}, Aggregate{}, ErrEntryNotFound},
	} {
		got, err := s.Find(ctx, tc.target)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("Find(%+v) = %v, %v; want %v, %v", tc.target, got, err, tc.want, tc.err)
		}
	}

	w := &writer{fail: map[string]bool{"e-2": true}}
	res, err := s.Retry(ctx, order1, w, caughtUp)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.written) != 1 || w.written[0] != "e-1" || !res.Failed() || res.Lifted || res.Err() == nil {
		t.Errorf("retry wrote %v: %+v", w.written, res)
	}
	open, err := s.List(ctx, Filter{AggregateID: "o-1"})
	if err != nil || len(open) != 2 || open[0].EventID != "e-2" || open[0].Attempts != 2 {
		t.Errorf("open after a failed retry: %+v %v", open, err)
	}
	w.fail = nil
	if res, err = s.Retry(ctx, order1, w, caughtUp); err != nil || !res.Lifted || res.Err() != nil || len(res.Outcomes) != 2 {
		t.Errorf("second retry: %+v %v", res, err)
	}
	if _, err := s.Find(ctx, Target{AggregateID: "o-1"}); !errors.Is(err, ErrEntryNotFound) {
		t.Errorf("lifted aggregate still found: %v", err)
	}
}
