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
// only needs one or two methods of either, through the small Execer and
// Tx interfaces, so it never commits, rolls back or otherwise manages the
// caller's transaction.
//
// # Transitions: no event without a real change
//
// Two concurrent commands must not record two contradicting facts (two
// "order.confirmed" for one order, "confirmed" after "cancelled"). The
// cure is a conditional change, UPDATE … WHERE status = 'pending'
// RETURNING version, and an event appended only when that change matched.
// Writer.Transition does both in one step, in the caller's transaction:
//
//	err := w.Transition(ctx, outbox.PgxTx(tx), outbox.Transition{
//		SQL: `UPDATE orders SET status = 'confirmed', version = version + 1
//		      WHERE id = $1 AND status = 'pending' RETURNING version`,
//		Args:  []any{id},
//		Event: &outbox.Event{AggregateType: "order", AggregateID: id, EventType: "order.confirmed", SchemaVersion: 1, Payload: payload},
//	})
//	if errors.Is(err, outbox.ErrInvalidTransition) { /* not pending: nothing written, answer 409 */ }
//
// The RETURNING value becomes the event's AggregateVersion. A change that
// matched no row appends nothing, returns ErrInvalidTransition (or the
// Transition's own error) and counts a conflict through Metrics
// (outbox_producer_transition_conflicts_total in package outboxprom), the
// version-conflict signal to watch in production. Any other unexpected row
// count is an error wrapping ErrUnexpectedRows.
//
// # Back-pressure: shed non-critical events before the disk fills
//
// While the relay or Kafka is down, the relay's replication slot keeps
// every byte of WAL the database writes, until max_slot_wal_keep_size
// invalidates the slot (events lost) or the disk fills (the database
// stops). A HealthMonitor reads the slot every few seconds, never per
// Append — retained WAL, safe_wal_size, the relay's WAL exhaustion
// forecast recomputed from its own samples, the age of the oldest
// unacknowledged event — and a Writer built WithBackpressure refuses
// events once a configured Budget is crossed: events of PriorityLow beyond
// HealthConfig.Soft, every event beyond the optional HealthConfig.Hard,
// the point where the service would rather stop than risk the disk.
// Refusal happens before any SQL with a *BackpressureError (errors.Is(err,
// ErrBackpressure)), so the business transaction can fail fast or go on
// without the event; Transition refuses before its change runs, too.
// Events are critical by default (the zero Priority), and a reading that
// cannot be refreshed refuses nothing. A zero HealthConfig field is its
// default and a negative limit is off, like a zero one (no limit is set
// by default). docs/operations.md explains how to pick the budgets from
// the forecast.
//
// # Event checks: a payload the relay cannot encode fails before commit
//
// With a schema registry record format (avro, protobuf, json-schema), a
// payload that does not match its registered schema is dead-lettered by
// the relay, after the business transaction committed. A Writer built
// WithEventCheck runs a check on each event before its INSERT, in the
// caller's transaction, and returns the check's error unchanged. The
// schema check is in package outboxschema, so that a producer that does
// not use it links no registry client or schema parser:
// outboxschema.New takes the relay's record configuration and topic
// template, and its Checker encodes the payload with the schema the
// relay will use and refuses a mismatch with an *outboxschema.SchemaError
// naming the field (errors.Is(err, ErrInvalidEvent)), before any SQL.
// Schemas are cached, so an Append of a schema already seen makes no
// request; a registry that cannot be asked for one not cached refuses the
// event too (outboxschema.ErrUnavailable). docs/schemas.md has the
// details.
//
// # Options
//
// NewWriter and NewHealthMonitor take Options, one type for the two: the
// Writer's (WithBinaryPayload, WithSchema, WithBackpressure,
// WithEventCheck, WithPropagator), the monitor's (WithLogger) and
// WithMetrics, which both take, so that one Metrics (outboxprom.New)
// counts the Writers' conflicts and refusals and the monitor's engaged
// levels. Each With function says whom it configures; the other constructor ignores it. The names are the
// relay's and the inbox's for the same concerns. A Writer logs nothing
// (it returns its errors) and the package starts no spans, so there is no
// WithTracerProvider, and WithLogger configures only the monitor.
//
// The table itself is created by package migrations (or by
// "outbox-relay migrate"); this package only inserts into it.
package outbox
