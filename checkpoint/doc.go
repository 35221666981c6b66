// Package checkpoint decides how far the replication slot may be confirmed
// (Tracker: Kafka acknowledgements in, confirmable LSN out) and saves that
// position as a checkpoint (Store, Saver), the one the CLI shows and resets
// with outbox-relay checkpoint show|reset.
//
// Package checkpoint is part of the engine under package relay and has no
// compatibility promise of its own: relay is what users import.
//
// The relay publishes events asynchronously, so Kafka acknowledgements come
// back in any order across partitions. A Tracker keeps the transactions it has
// seen in WAL order and reports as flushed the TransactionEndLSN of the last
// transaction such that it and every transaction before it are fully
// acknowledged. Confirming anything later would let PostgreSQL discard WAL
// for events Kafka never stored; confirming less only causes redelivery.
//
// The Tracker is also the relay's in-flight window: it counts unacknowledged
// events and bytes, and the replication stream stops reading while the window
// is full. That is what keeps memory independent of transaction size and of
// the backlog.
//
// The flush position moves only at transaction ends, so the Tracker also
// knows, per event (Seq), which acknowledgements arrived, and reports the
// acknowledged prefix of the oldest unconfirmed transaction as a Partial:
// a restart inside a large transaction then skips what Kafka has instead
// of re-sending all of it. The restarted relay settles the events it skips
// (Tracker.Settle), so the Partial it saves extends the one it resumed
// from and a second crash re-sends no more than the first.
//
// # Saved checkpoints
//
// A Store saves and reads the relay's checkpoints: the position up
// to which Kafka has acknowledged every event, kept in a relay-owned table
// (migration 3, outbox_relay_checkpoint) beside the outbox table.
//
// The replication slot already stores a position, so why another one? The
// slot's confirmed_flush_lsn lags the acknowledgements (a status update is
// sent some time after them), is not made durable at every update (after a
// PostgreSQL crash it can move backwards), and disappears with the slot
// (a mistaken drop, max_slot_wal_keep_size, a failover to a replica without
// the slot). A checkpoint is a committed row: after a crash the relay can
// skip what Kafka already acknowledged instead of re-publishing it, and
// after a lost slot outbox-relay recover knows from where to back-fill.
//
// A checkpoint is never ahead of the acknowledgements (it is saved from the
// acknowledgement tracker), so skipping up to it loses nothing. The same
// holds for its Partial (migration 5): the acknowledged prefix of the one
// transaction after the position, which a restart skips when the slot
// replays that transaction.
//
// # Failovers and other timelines
//
// An LSN is meaningful only on the cluster and timeline that wrote it, so
// every checkpoint carries the server's system identifier and timeline
// (IDENTIFY_SYSTEM). A promoted standby keeps its primary's system
// identifier and starts a new timeline, whose history (TIMELINE_HISTORY,
// History) names the timelines it descends from and where each ended: WAL
// up to that switch point is the same on both. So a checkpoint saved on
// (system S, timeline T) at LSN L is judged, on a server of (S', T'), by
// Checkpoint.Lineage and Store.Resume:
//
//   - S = S' and T = T': applied (the skip-ahead and the Partial).
//   - S = S', T an ancestor of T', L at or before where T ended: applied
//     the same way. Its position names the same WAL here, its fence's xids
//     are the same transactions (a physical replica replays the primary's
//     WAL), and the relay saves it again under T' at its first save. Only
//     a Decoded past the switch point and a Partial of a transaction that
//     commits at or past it are dropped: those positions name other WAL
//     here.
//   - S = S', T an ancestor, L past where T ended: the relay confirmed WAL
//     the promoted standby never received (possible when the primary's
//     synchronized_standby_slots does not name the standby). Refusing it
//     would stop the relay after a legitimate failover, and applying it
//     would skip WAL of the new timeline, so neither: nothing is skipped,
//     the relay resumes from the slot's own position (duplicates, never
//     loss) and logs a warning (Resumption.Diverged) that events past the
//     switch point may have been published from the old primary although
//     this timeline lacks them.
//   - S ≠ S', or T not an ancestor of T' (a sibling branch, a later
//     timeline): refused with a *MismatchError, never applied.
//
// recover bounds its back-fill by the fence of an ancestor's checkpoint
// when the fence is at or before the switch point. cleanup and replay
// (Verify) accept only the server's own timeline: the relay saves one as
// soon as it resumes after a failover.
//
// Outbox rows carry no LSN. To map a position to rows the saver records a
// Fence with each checkpoint: two snapshots around a WAL insert position.
// Every transaction that commits after Fence.LSN has xid >= Fence.Xmin, and
// every transaction that committed before Fence.LSN has xid < Fence.Xmax.
// A checkpoint's fence is at or before its LSN, so "rows with xid >= Xmin"
// holds every row committed after the checkpoint — and some before it
// (duplicates, never loss). See Selection in package backfill (cmd/outbox-relay/internal/backfill).
package checkpoint
