package inbox_test

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// A Handler applies one event per call; the consumer still commits a whole
// batch of them in one transaction.
func ExampleHandler() {
	handler := func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		tag, err := tx.Exec(ctx, `INSERT INTO shipping.shipments (order_id, event_id) VALUES ($1, $2)`, ev.AggregateID, ev.ID)
		if err != nil {
			return err
		}
		return inbox.ExpectRows(tag, 1)
	}
	_ = inbox.Config{Handler: handler /* Name, Brokers, Topics, Pool … */}
}

// A BatchHandler applies a batch's fresh events with one statement. Its
// check compares with the batch: one row per event. A mismatch fails the
// batch, and the consumer halves it until the event at fault is alone.
func ExampleBatchHandler() {
	handler := func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
		orders := make([]string, len(evs))
		ids := make([]string, len(evs))
		for i, ev := range evs {
			orders[i], ids[i] = ev.AggregateID, ev.ID
		}
		tag, err := tx.Exec(ctx, `INSERT INTO shipping.shipments (order_id, event_id)
			SELECT o, e::uuid FROM unnest($1::text[], $2::text[]) AS u(o, e)
			ON CONFLICT (order_id) DO NOTHING`, orders, ids)
		if err != nil {
			return err
		}
		return inbox.ExpectRows(tag, int64(len(evs)))
	}
	_ = inbox.Config{BatchHandler: handler, BatchSize: 500 /* Name, Brokers, Topics, Pool … */}
}

// A version-guarded projection in a batch: each event must move its
// aggregate from version v-1 to v. With several versions of one aggregate
// in a batch, apply them in order (here one statement per event inside the
// batch's transaction) or group each aggregate's consecutive versions
// into one row of an UPDATE … FROM unnest(…) guarded by the first version
// minus one, and expect one changed row per aggregate.
func ExampleBatchHandler_versionGuarded() {
	handler := func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
		for _, ev := range evs {
			tag, err := tx.Exec(ctx, `UPDATE orders_view SET version = $2 WHERE id = $1 AND version = $2 - 1`,
				ev.AggregateID, ev.AggregateVersion)
			if err != nil {
				return err
			}
			if err := inbox.ExpectRows(tag, 1); err != nil {
				return err // a gap or a reordering: the batch is halved down to this event
			}
		}
		return nil
	}
	_ = inbox.Config{BatchHandler: handler}
}
