// Package checkpoint decides how far the replication slot may be confirmed
// (Tracker: Kafka acknowledgements in, confirmable LSN out) and saves that
// position as a checkpoint (Store, Saver), the one the CLI shows and resets
// with outbox-relay checkpoint show|reset.
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
// of re-sending all of it.
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
// An LSN is meaningful only on the cluster and timeline that wrote it, so
// every checkpoint carries the server's system identifier and timeline
// (IDENTIFY_SYSTEM); a checkpoint of another identity is refused with a
// *MismatchError, never applied.
//
// Outbox rows carry no LSN. To map a position to rows the saver records a
// Fence with each checkpoint: two snapshots around a WAL insert position.
// Every transaction that commits after Fence.LSN has xid >= Fence.Xmin, and
// every transaction that committed before Fence.LSN has xid < Fence.Xmax.
// A checkpoint's fence is at or before its LSN, so "rows with xid >= Xmin"
// holds every row committed after the checkpoint — and some before it
// (duplicates, never loss). See Window in package backfill.
package checkpoint
