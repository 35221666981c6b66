// Package cleanup deletes outbox rows the relay has confirmed, so the table
// stays small without ever losing an event that was not delivered.
//
// # The safety rule
//
// The outbox table is the durable copy behind outbox-relay recover and
// replay: a row deleted too early is an event no back-fill can restore. So
// a row is deleted only when all of these hold:
//
//  1. created_at < now() - OlderThan (the retention the operator chose);
//  2. its xid (the row's xmin) is below the fence of the newest checkpoint
//     of the slot (package position): the saver's first snapshot had no
//     transaction older than fence.Xmin running, so a row with a smaller
//     xid committed before the fence's WAL position, which is at or before
//     the checkpoint's LSN, up to which Kafka acknowledged every event.
//     The bound is the minimum over every slot with checkpoints for the
//     table (two relays of one outbox each hold back cleanup), and over the
//     oldest checkpoint of the slot saved inside the retention (see
//     "Replay window" below);
//  3. no dead-letter row of the event is open (status dead or parked), and
//     its aggregate is not quarantined (no open dead-letter row of the
//     aggregate at all). The whole aggregate is kept while quarantined:
//     its history is what an operator inspects before deciding, and what
//     replay --aggregate re-publishes after a retry; quarantines are few
//     and short, so this costs little. Rows with a NULL event_id or
//     aggregate_id (always poison) are kept too.
//
// Rule 2 compares the 32-bit xmin with the 64-bit fence through age(), as
// package backfill does: exact while both are within 2^31 transactions of
// the present. A row older than that (its raw xmin wrapped around) compares
// as young and is kept, never deleted by mistake; a fence that old is
// refused. An UPDATE of a row gives it a new xmin: it then counts as
// committed at the update, which only keeps it longer.
//
// Rows written before the slot existed (a table adopted by migrate) never
// went through the slot, yet rule 2 treats them as confirmed: replay them
// (outbox-relay replay --all) or delete them deliberately before enabling
// cleanup.
//
// A checkpoint of another system identifier or timeline (a restore, a
// promoted replica) is refused, like everywhere else: its fence names xids
// of another history. So is a missing checkpoint: without one nothing is
// known to be acknowledged.
//
// # Replay window
//
// A checkpoint older than the cutoff may map to rows cleanup deletes, and a
// replay --from-lsn from it would then silently publish a partial set. So
// cleanup also keeps every row at or above the fence of the slot's oldest
// checkpoint saved at or after the cutoff, and prunes the slot's older
// checkpoints first: a replay from a position older than the retention
// then fails loudly ("no position at or before"), and every position still
// in the history finds all its rows. The replay window is min(outbox
// retention, --checkpoint-retention), as docs/operations.md states.
//
// # Gentle on the server
//
// Rows are deleted in small batches (BatchSize rows, each batch its own
// short transaction with a lock_timeout), with a Pause between batches,
// walking the heap in ranges of pages by ctid (a TID range scan), so no
// statement scans the whole table, no lock is held for long, WAL is written
// in small steps and autovacuum keeps up. MaxDuration bounds a run.
//
// # Partitioned tables
//
// For an outbox partitioned by range on created_at, a partition whose upper
// bound is at or before the cutoff and all of whose rows pass the rule is
// detached and dropped (one short transaction under lock_timeout, after
// re-checking the rows under a SHARE lock) instead of being emptied row by
// row; any other partition (the default one, a partition with a row that
// fails the rule, one whose lock could not be taken) gets the row deletes.
package cleanup
