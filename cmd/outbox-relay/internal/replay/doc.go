// Package replay re-publishes events still held in the outbox table, for
// consumers that lost data or a topic that was recreated: it maps the
// operator's positions (an LSN, the newest checkpoint, a time, or the whole
// table) to rows through the checkpoint history, then publishes them with
// package backfill, each marked with the header outbox_replay=replay.
//
// A replay is safe beside a running relay: it reads the table in one
// snapshot and publishes; it never touches the slot or the checkpoints.
// Quarantined aggregates (those with an open dead letter) are left out:
// dlq retry re-publishes them in order.
//
// The mapping is conservative (see package backfill): a few events from
// before the start may be included, none inside the range is missed.
package replay
