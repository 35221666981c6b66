package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Identity names the WAL an LSN belongs to.
type Identity struct {
	// SystemID is the cluster's system identifier (pg_control), different
	// for every initdb; a physical replica shares its primary's.
	SystemID string
	// Timeline changes when a standby is promoted or a backup is restored
	// to a point in time: WAL positions after the switch differ.
	Timeline int32
}

func (id Identity) String() string {
	return fmt.Sprintf("system %s timeline %d", id.SystemID, id.Timeline)
}

// Identify runs IDENTIFY_SYSTEM on a replication connection. It also returns
// the server's current WAL flush position.
func Identify(ctx context.Context, conn *pgconn.PgConn) (Identity, pglogrepl.LSN, error) {
	r, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return Identity{}, 0, fmt.Errorf("IDENTIFY_SYSTEM: %w", err)
	}
	return Identity{SystemID: r.SystemID, Timeline: r.Timeline}, r.XLogPos, nil
}

// Fence bounds the transaction ids of the transactions that committed
// before and after a WAL position. It is captured by CaptureFence.
type Fence struct {
	// LSN is the WAL insert position read between the two snapshots.
	LSN pglogrepl.LSN
	// Xmin is the oldest transaction still running at the first snapshot,
	// taken before LSN was read: a transaction that commits after LSN was
	// running then or began later, so its xid is >= Xmin.
	Xmin uint64
	// Xmax is the next unassigned xid at the second snapshot, taken after
	// LSN was read: a transaction that committed before LSN has xid < Xmax.
	Xmax uint64
	// At is the time of the first snapshot: a transaction that commits
	// after At has xid >= Xmin too (used by --since).
	At time.Time
}

// CaptureFence takes the two snapshots and the WAL position, in that
// order, as three statements (the order is what makes the bounds hold, so
// it is not left to the evaluation order within one statement).
func CaptureFence(ctx context.Context, db DB) (Fence, error) {
	var f Fence
	var lsn string
	if err := db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, clock_timestamp()`).Scan(&f.Xmin, &f.At); err != nil {
		return f, fmt.Errorf("capture fence: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return f, fmt.Errorf("capture fence: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&f.Xmax); err != nil {
		return f, fmt.Errorf("capture fence: %w", err)
	}
	var err error
	f.LSN, err = pglogrepl.ParseLSN(lsn)
	return f, err
}

// Checkpoint is one saved position.
type Checkpoint struct {
	OutboxTable string
	Slot        string
	// LSN is the TransactionEndLSN up to which Kafka acknowledged every
	// event (or a later keepalive position with nothing in flight).
	LSN pglogrepl.LSN
	// CommitTime and Xid describe the last acknowledged transaction; zero
	// when the position moved by keepalives only since the relay started.
	CommitTime time.Time
	Xid        uint32
	Identity   Identity
	// Fence is a fence at or before LSN; nil when none was captured yet.
	Fence *Fence
	// Decoded is the highest TransactionEndLSN whose events the saving run
	// had handed to the publisher; 0 when unknown. Events between
	// LSN and Decoded may have reached Kafka already: a restart that
	// publishes them again counts them as redelivered (migration 4).
	Decoded pglogrepl.LSN
	// Partial is the acknowledged prefix of the oldest transaction not
	// confirmed at LSN (migration 5); zero when none was known. A restart
	// that replays that transaction skips exactly this prefix.
	Partial   Partial
	StartedAt time.Time
	SavedAt   time.Time
}

// ErrCheckpointNotFound is returned when no checkpoint was saved for the slot.
var ErrCheckpointNotFound = errors.New("no checkpoint saved")

// MismatchError is a checkpoint saved on another cluster, or on a
// timeline the server's does not descend from (Verify: on any other
// timeline): its LSN does not name the same WAL here, so it is never
// applied.
type MismatchError struct {
	Slot    string
	Saved   Identity
	Current Identity
}

func (e *MismatchError) Error() string {
	what := "timeline"
	if e.Saved.SystemID != e.Current.SystemID {
		what = "system identifier"
	}
	return fmt.Sprintf("checkpoint of slot %q was saved on %s, this server is %s (another %s): its LSN does not name the same WAL here, "+
		"so it is refused; after a failover or restore run \"outbox-relay recover --since TIME\" (back-fills from the outbox table), "+
		"or \"outbox-relay checkpoint reset\" to discard it", e.Slot, e.Saved, e.Current, what)
}

// Verify refuses cp unless it was saved on id: the strict check of the
// commands that read checkpoints over a plain connection only. cleanup
// and replay keep it, also after a failover: a checkpoint of an ancestor
// timeline (Lineage) would do for them too, but the relay saves one on
// the new timeline as soon as it resumes there, so they wait for that one
// instead of needing a replication connection for the timeline history.
func (cp Checkpoint) Verify(id Identity) error {
	if cp.Identity != id {
		return &MismatchError{Slot: cp.Slot, Saved: cp.Identity, Current: id}
	}
	return nil
}
