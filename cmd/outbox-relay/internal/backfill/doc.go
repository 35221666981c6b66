// Package backfill reads events still held in the outbox table and
// re-publishes them through the relay's publisher, per aggregate in commit
// order. outbox-relay replay and outbox-relay recover are built on it.
//
// # Which rows
//
// Outbox rows carry no LSN, so positions are mapped to rows through
// transaction ids (see package position): a Selection bounds the rows' xmin by
// fences the relay recorded with its checkpoints. The bounds are
// conservative — a selection may hold rows committed a little before its
// start (duplicates), never miss one committed inside it. With
// track_commit_timestamp on, --since/--until also compare each row's
// commit timestamp; rows committed before the setting was enabled have none
// and are kept.
//
// xmin is a 32-bit xid; it is compared with a fence's 64-bit xid through
// age(), which is exact while both are within 2^31 transactions of the
// present. Rows older than that (frozen long ago) compare as young, so they
// are included rather than missed; a fence that old is not used at all.
//
// # Which order
//
// With track_commit_timestamp on, rows are published in commit-timestamp
// order (ties by aggregate_version): that is the commit order for
// transactions serialised by a lock on their aggregate, which is what
// order per aggregate means. Without it the order is, per aggregate,
// aggregate_version, then created_at, then event_id: the producer library
// and the contract make aggregate_version grow with every committed event
// of an aggregate (the UPDATE ... RETURNING version under the aggregate's
// row lock), so it is the commit order whenever producers follow it.
//
// # Marking
//
// Every record gets the header outbox_replay (Source.Mark: "replay" or
// "recover"), added to the row's headers object, so consumers and
// operators can tell re-published records apart. Consumers must still
// dedupe on event_id: delivery stays at-least-once.
package backfill
