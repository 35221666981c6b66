package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// DB is the subset of pgx.Conn / pgxpool.Pool the store uses.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Segment is how long one checkpoint row is updated in place before a new
// one starts. A row keeps the first fence of its segment (valid for every
// position saved in it), so the rows are the history that maps replay
// positions to table rows with a granularity of one Segment: a replay or
// recover starts at most a Segment (plus the fence's lag) early.
const Segment = 10 * time.Second

// Store reads and writes the checkpoints of one outbox table and slot.
type Store struct {
	db     DB
	table  string // quoted checkpoint table
	outbox string
	slot   string
}

// NewStore returns the store for outbox table t and slot.
func NewStore(db DB, t migrations.Table, slot string) *Store {
	return &Store{db: db, table: migrations.CheckpointTable(t).Quoted(), outbox: t.String(), slot: slot}
}

// Check verifies the checkpoint table exists.
func (s *Store) Check(ctx context.Context) error {
	return migrations.CheckTable(ctx, s.db, "checkpoint table", s.table,
		migrations.Added{Migration: 4, Columns: []string{"decoded_lsn"}},
		migrations.Added{Migration: 5, Columns: []string{"partial_commit_lsn", "partial_events", "partial_acked"}})
}

const columns = `outbox_table, slot, lsn::text, commit_time, xid, system_identifier, timeline,
	fence_lsn::text, fence_xmin, fence_xmax, fence_at, started_at, saved_at, decoded_lsn::text,
	partial_commit_lsn::text, partial_events, partial_acked`

func scan(row pgx.Row) (Checkpoint, error) {
	var cp Checkpoint
	var lsn string
	var commit, fenceAt *time.Time
	var xid, fxmin, fxmax *int64
	var flsn, decoded, plsn *string
	var pevents *int32
	var packed []byte
	err := row.Scan(&cp.OutboxTable, &cp.Slot, &lsn, &commit, &xid, &cp.Identity.SystemID, &cp.Identity.Timeline,
		&flsn, &fxmin, &fxmax, &fenceAt, &cp.StartedAt, &cp.SavedAt, &decoded, &plsn, &pevents, &packed)
	if err != nil {
		return cp, err
	}
	if plsn != nil && pevents != nil && (*pevents > 0 || len(packed) > 0) {
		if cp.Partial.CommitLSN, err = pglogrepl.ParseLSN(*plsn); err != nil {
			return cp, err
		}
		cp.Partial.Events, cp.Partial.Acked = int(*pevents), packed
	}
	if decoded != nil {
		if cp.Decoded, err = pglogrepl.ParseLSN(*decoded); err != nil {
			return cp, err
		}
	}
	if cp.LSN, err = pglogrepl.ParseLSN(lsn); err != nil {
		return cp, err
	}
	if commit != nil {
		cp.CommitTime = *commit
	}
	if xid != nil {
		cp.Xid = uint32(*xid)
	}
	if flsn != nil && fxmin != nil && fxmax != nil && fenceAt != nil {
		f := &Fence{Xmin: uint64(*fxmin), Xmax: uint64(*fxmax), At: *fenceAt}
		if f.LSN, err = pglogrepl.ParseLSN(*flsn); err != nil {
			return cp, err
		}
		cp.Fence = f
	}
	return cp, nil
}

// Latest returns the newest checkpoint, or ErrCheckpointNotFound.
func (s *Store) Latest(ctx context.Context) (Checkpoint, error) {
	cp, err := scan(s.db.QueryRow(ctx, `SELECT `+columns+` FROM `+s.table+`
		WHERE outbox_table = $1 AND slot = $2 ORDER BY id DESC LIMIT 1`, s.outbox, s.slot))
	if errors.Is(err, pgx.ErrNoRows) {
		return cp, fmt.Errorf("slot %q of %s: %w", s.slot, s.outbox, ErrCheckpointNotFound)
	}
	if err != nil {
		return cp, fmt.Errorf("read checkpoint: %w", err)
	}
	return cp, nil
}

// Save records cp (OutboxTable and Slot are the store's). The newest row is
// updated while it is younger than Segment and of the same identity (its
// first fence is kept), and never moved backwards; otherwise a new row starts and rows saved before
// retention (0: keep all) are pruned, except the newest.
func (s *Store) Save(ctx context.Context, cp Checkpoint, retention time.Duration) error {
	var commit any
	if !cp.CommitTime.IsZero() {
		commit = cp.CommitTime
	}
	var xid any
	if cp.Xid != 0 {
		xid = int64(cp.Xid)
	}
	var flsn, fxmin, fxmax, fat any
	if f := cp.Fence; f != nil {
		flsn, fxmin, fxmax, fat = f.LSN.String(), int64(f.Xmin), int64(f.Xmax), f.At
	}
	var decoded any
	if cp.Decoded != 0 {
		decoded = cp.Decoded.String()
	}
	// The partial is written as given (the saver keeps it current): a
	// row without one must not keep a stale one.
	var plsn, pevents, packed any
	if p := cp.Partial; !p.Empty() {
		plsn, pevents = p.CommitLSN.String(), int32(min(p.Events, math.MaxInt32))
		if len(p.Acked) > 0 {
			packed = p.Acked
		}
	}
	args := []any{s.outbox, s.slot, cp.LSN.String(), commit, xid, cp.Identity.SystemID, cp.Identity.Timeline,
		flsn, fxmin, fxmax, fat, decoded, plsn, pevents, packed, Segment.Seconds()}
	tag, err := s.db.Exec(ctx, `UPDATE `+s.table+` SET lsn = $3::text::pg_lsn, commit_time = coalesce($4, commit_time),
			xid = coalesce($5, xid), fence_lsn = coalesce(fence_lsn, $8::text::pg_lsn), fence_xmin = coalesce(fence_xmin, $9),
			fence_xmax = coalesce(fence_xmax, $10), fence_at = coalesce(fence_at, $11),
			decoded_lsn = greatest(decoded_lsn, $12::text::pg_lsn),
			partial_commit_lsn = $13::text::pg_lsn, partial_events = $14, partial_acked = $15, saved_at = now()
		WHERE id = (SELECT max(id) FROM `+s.table+` WHERE outbox_table = $1 AND slot = $2)
		  AND system_identifier = $6 AND timeline = $7 AND lsn <= $3::text::pg_lsn
		  AND started_at > now() - make_interval(secs => $16)`, args...)
	if err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	if _, err := s.db.Exec(ctx, `INSERT INTO `+s.table+` (outbox_table, slot, lsn, commit_time, xid, system_identifier, timeline,
			fence_lsn, fence_xmin, fence_xmax, fence_at, decoded_lsn, partial_commit_lsn, partial_events, partial_acked)
		VALUES ($1, $2, $3::text::pg_lsn, $4, $5, $6, $7, $8::text::pg_lsn, $9, $10, $11, $12::text::pg_lsn,
			$13::text::pg_lsn, $14, $15)`, args[:15]...); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if retention > 0 {
		if _, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE outbox_table = $1 AND slot = $2
			AND saved_at < now() - make_interval(secs => $3)
			AND id < (SELECT max(id) FROM `+s.table+` WHERE outbox_table = $1 AND slot = $2)`,
			s.outbox, s.slot, retention.Seconds()); err != nil {
			return fmt.Errorf("prune checkpoints: %w", err)
		}
	}
	return nil
}

// Reset deletes every checkpoint of the slot and returns how many rows.
func (s *Store) Reset(ctx context.Context) (int64, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM `+s.table+` WHERE outbox_table = $1 AND slot = $2`, s.outbox, s.slot)
	if err != nil {
		return 0, fmt.Errorf("reset checkpoints: %w", err)
	}
	return tag.RowsAffected(), nil
}

// FenceBefore returns the newest fence of identity id at or before lsn:
// every transaction that committed after lsn has xid >= its Xmin. ok is
// false when the history holds none (the caller must then scan all rows).
func (s *Store) FenceBefore(ctx context.Context, id Identity, lsn pglogrepl.LSN) (Fence, bool, error) {
	return s.fence(ctx, id, `fence_lsn <= $5::text::pg_lsn ORDER BY fence_lsn DESC`, lsn.String())
}

// FenceAfter returns the oldest fence of identity id at or after lsn:
// every transaction that committed at or before lsn has xid < its Xmax.
func (s *Store) FenceAfter(ctx context.Context, id Identity, lsn pglogrepl.LSN) (Fence, bool, error) {
	return s.fence(ctx, id, `fence_lsn >= $5::text::pg_lsn ORDER BY fence_lsn`, lsn.String())
}

// FenceBeforeTime returns the newest fence taken at or before t: every
// transaction that committed after t has xid >= its Xmin.
func (s *Store) FenceBeforeTime(ctx context.Context, id Identity, t time.Time) (Fence, bool, error) {
	return s.fence(ctx, id, `fence_at <= $5 ORDER BY fence_at DESC`, t)
}

func (s *Store) fence(ctx context.Context, id Identity, cond string, arg any) (Fence, bool, error) {
	var f Fence
	var lsn string
	err := s.db.QueryRow(ctx, `SELECT fence_lsn::text AS fence_lsn_text, fence_xmin, fence_xmax, fence_at FROM `+s.table+`
		WHERE outbox_table = $1 AND slot = $2 AND system_identifier = $3 AND timeline = $4 AND fence_lsn IS NOT NULL
		AND `+cond+` LIMIT 1`, s.outbox, s.slot, id.SystemID, id.Timeline, arg).Scan(&lsn, &f.Xmin, &f.Xmax, &f.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return f, false, nil
	}
	if err != nil {
		return f, false, fmt.Errorf("read checkpoint history: %w", err)
	}
	f.LSN, err = pglogrepl.ParseLSN(lsn)
	return f, err == nil, err
}

// AheadError is a checkpoint past the server's WAL: it cannot have been
// written by this server's history (a restored backup without a timeline
// switch, say), so it is refused.
type AheadError struct {
	Slot     string
	LSN, WAL pglogrepl.LSN
}

func (e *AheadError) Error() string {
	return fmt.Sprintf("checkpoint of slot %q is at %s, past the server's WAL end %s: it belongs to another history, so it is refused; "+
		"run \"outbox-relay checkpoint reset\" (or \"outbox-relay recover\") after checking what happened", e.Slot, e.LSN, e.WAL)
}
