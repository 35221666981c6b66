package cleanup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// DB is what cleanup needs from a pgxpool.Pool: each batch runs in a
// transaction of its own.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// maxFenceAge is the oldest fence (in transactions) cleanup uses: age()
// comparisons are exact within 2^31 transactions; the margin covers the
// transactions consumed while a run lasts.
const maxFenceAge = 1<<31 - 1<<26

// Bound is what a run may delete: rows created before Cutoff with an xid
// below Xid (and no open dead-letter row).
type Bound struct {
	Cutoff time.Time
	// Xid is the smallest fence.Xmin of the applicable checkpoints.
	Xid uint64
	// LimitedBy names the checkpoint that gave Xid, for the report.
	LimitedBy string
	// Checkpoint is the newest checkpoint of the slot.
	Checkpoint checkpoint.Checkpoint
	// historyID is the id of the slot's oldest checkpoint saved at or
	// after the cutoff (0: none); older ones are pruned.
	historyID int64
}

// NoCheckpointError is a slot without a usable checkpoint: nothing is known
// to be acknowledged, so nothing may be deleted.
type NoCheckpointError struct {
	Slot, Table, Why string
}

func (e *NoCheckpointError) Error() string {
	return fmt.Sprintf("cleanup of %s refused: slot %q %s, so no row is known to be acknowledged by Kafka; "+
		"run the relay (outbox-relay run, checkpoints on by Checkpoints.Interval) until \"outbox-relay checkpoint show\" shows a fence, then retry",
		e.Table, e.Slot, e.Why)
}

// readBound maps the checkpoints of t to a Bound, refusing what cannot be
// trusted. id is the server's identity (IDENTIFY_SYSTEM).
func readBound(ctx context.Context, db DB, t migrations.Table, slot string, id checkpoint.Identity, olderThan time.Duration) (Bound, error) {
	var b Bound
	store := checkpoint.NewStore(db, t, slot)
	if err := store.Check(ctx); err != nil {
		return b, err
	}
	cp, err := store.Latest(ctx)
	if errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		return b, &NoCheckpointError{Slot: slot, Table: t.String(), Why: "has no checkpoint"}
	}
	if err != nil {
		return b, err
	}
	if err := cp.Verify(id); err != nil {
		return b, fmt.Errorf("cleanup of %s: %w", t, err)
	}
	if cp.Fence == nil {
		return b, &NoCheckpointError{Slot: slot, Table: t.String(), Why: fmt.Sprintf("has a checkpoint at %s without a fence yet", cp.LSN)}
	}
	b.Checkpoint = cp
	var walLSN string
	var nextXid uint64
	if err := db.QueryRow(ctx, `SELECT now() - make_interval(secs => $1), pg_current_wal_lsn()::text,
			pg_snapshot_xmax(pg_current_snapshot())::text::bigint`, olderThan.Seconds()).Scan(&b.Cutoff, &walLSN, &nextXid); err != nil {
		return b, fmt.Errorf("read server position: %w", err)
	}
	if wal, err := pglogrepl.ParseLSN(walLSN); err == nil && cp.LSN > wal {
		return b, fmt.Errorf("cleanup of %s: %w", t, &checkpoint.AheadError{Slot: slot, LSN: cp.LSN, WAL: wal})
	}
	b.Xid, b.LimitedBy = cp.Fence.Xmin, fmt.Sprintf("newest checkpoint of slot %s (%s)", slot, cp.LSN)

	cpTable := migrations.CheckpointTable(t).Quoted()
	// The newest checkpoint of every other slot of the table.
	rows, err := db.Query(ctx, `SELECT DISTINCT ON (slot) slot, lsn::text, system_identifier, timeline, fence_xmin
		FROM `+cpTable+` WHERE outbox_table = $1 AND slot <> $2 ORDER BY slot, id DESC`, t.String(), slot)
	if err != nil {
		return b, fmt.Errorf("read checkpoints of other slots: %w", err)
	}
	type other struct {
		slot, lsn string
		id        checkpoint.Identity
		xmin      *int64
	}
	var others []other
	for rows.Next() {
		var o other
		if err := rows.Scan(&o.slot, &o.lsn, &o.id.SystemID, &o.id.Timeline, &o.xmin); err != nil {
			rows.Close()
			return b, fmt.Errorf("read checkpoints of other slots: %w", err)
		}
		others = append(others, o)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return b, fmt.Errorf("read checkpoints of other slots: %w", err)
	}
	for _, o := range others {
		if o.id != id {
			return b, fmt.Errorf("cleanup of %s refused: slot %q also has checkpoints for this table, saved on %s (this server is %s): "+
				"its position cannot be mapped here; if that slot is gone for good run \"outbox-relay checkpoint reset --slot %s\"", t, o.slot, o.id, id, o.slot)
		}
		if o.xmin == nil {
			return b, &NoCheckpointError{Slot: o.slot, Table: t.String(), Why: "(another relay of this table) has a checkpoint without a fence yet"}
		}
		if uint64(*o.xmin) < b.Xid {
			b.Xid, b.LimitedBy = uint64(*o.xmin), fmt.Sprintf("newest checkpoint of slot %s (%s); reset its checkpoints if that relay is gone", o.slot, o.lsn)
		}
	}

	// The oldest checkpoint of the slot inside the retention: every row a
	// replay from it selects must stay.
	var hid, hxmin int64
	err = db.QueryRow(ctx, `SELECT id, fence_xmin FROM `+cpTable+` WHERE outbox_table = $1 AND slot = $2
			AND system_identifier = $3 AND timeline = $4 AND fence_xmin IS NOT NULL AND fence_at >= $5
		ORDER BY id LIMIT 1`, t.String(), slot, id.SystemID, id.Timeline, b.Cutoff).Scan(&hid, &hxmin)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return b, fmt.Errorf("read checkpoint history: %w", err)
	default:
		b.historyID = hid
		if uint64(hxmin) < b.Xid {
			b.Xid, b.LimitedBy = uint64(hxmin), fmt.Sprintf("oldest checkpoint of slot %s inside the retention (replay window)", slot)
		}
	}
	if nextXid > b.Xid && nextXid-b.Xid > maxFenceAge {
		return b, fmt.Errorf("cleanup of %s refused: the fence (xid %d, %s) is %d transactions old, too old to compare row xids with; "+
			"let the relay save a fresh checkpoint (is it stuck? see outbox-relay checkpoint show)", t, b.Xid, b.LimitedBy, nextXid-b.Xid)
	}
	return b, nil
}

// pruneHistory deletes the slot's checkpoints older than the oldest one
// inside the retention (never the newest): positions whose rows cleanup may
// delete are then unknown to replay instead of mapping to partial sets.
func pruneHistory(ctx context.Context, db DB, t migrations.Table, slot string, b Bound) (int64, error) {
	keep := b.historyID
	if keep == 0 {
		if err := db.QueryRow(ctx, `SELECT max(id) FROM `+migrations.CheckpointTable(t).Quoted()+
			` WHERE outbox_table = $1 AND slot = $2`, t.String(), slot).Scan(&keep); err != nil {
			return 0, fmt.Errorf("read checkpoint history: %w", err)
		}
	}
	tag, err := db.Exec(ctx, `DELETE FROM `+migrations.CheckpointTable(t).Quoted()+` WHERE outbox_table = $1 AND slot = $2 AND id < $3`,
		t.String(), slot, keep)
	if err != nil {
		return 0, fmt.Errorf("prune checkpoint history: %w", err)
	}
	return tag.RowsAffected(), nil
}
