// Package outbox is the producer side of outbox-relay: it writes events to
// the outbox table inside the application's own database transaction.
//
// Writing the event in the same transaction as the business change is the
// whole point of the transactional outbox: either both commit or neither
// does, so Kafka never sees an event for a change that was rolled back and
// never misses one for a change that committed. The relay later reads the
// committed rows from the WAL and publishes them.
//
// A typical use:
//
//	w := outbox.NewWriter(table)
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	// ... UPDATE orders ... RETURNING version
//	err := w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
//		AggregateType:    "order",
//		AggregateID:      id,
//		AggregateVersion: version,
//		EventType:        "order.confirmed",
//		SchemaVersion:    1,
//		Payload:          payload,
//	})
//	// ... tx.Commit(ctx)
//
// The package works with pgx (PgxTx) and with database/sql (SQLTx). It
// only needs one method of either, through the small Execer interface, so
// it never commits, rolls back or otherwise manages the caller's
// transaction.
//
// The table itself is created by package migrations (or by
// "outbox-relay migrate"); this package only inserts into it.
//
// # Back-pressure
//
// While the relay or Kafka is down, the relay's replication slot keeps
// every byte of WAL the database writes, until max_slot_wal_keep_size
// invalidates the slot (events lost) or the disk fills (the database
// stops). A HealthMonitor reads the slot every few seconds — retained WAL,
// safe_wal_size, the relay's WAL exhaustion forecast recomputed from its
// own samples, the age of the oldest unacknowledged event — and a Writer
// built WithBackpressure refuses events once a configured Budget is
// crossed: events of PriorityLow beyond HealthConfig.Soft, every event
// beyond the optional HealthConfig.Hard. Refusal happens before any SQL
// with a *BackpressureError (errors.Is(err, ErrBackpressure)), so the
// business transaction can fail fast or go on without the event. Events
// are critical by default (the zero Priority), and a reading that cannot
// be refreshed refuses nothing. docs/operations.md explains how to pick
// the budgets from the forecast.
package outbox
