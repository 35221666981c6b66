package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// lockTimeout bounds every lock a run waits for: producers must never
// queue behind cleanup.
const lockTimeout = 2 * time.Second

// Cleaner deletes the confirmed rows of one outbox table.
type Cleaner struct {
	DB    DB
	Table migrations.Table
	// Slot is the relay's slot: its checkpoints say what was acknowledged.
	Slot string
	// Identity is the server's (IDENTIFY_SYSTEM): checkpoints of another
	// system or timeline are refused.
	Identity checkpoint.Identity
	Options  Options
	Log      *slog.Logger
	// OnDelete, if set, is called after every batch with the rows it
	// deleted (metrics).
	OnDelete func(rows int64)
}

// Dropped is one partition dropped whole.
type Dropped struct {
	Partition string
	Rows      int64
}

// Result describes a run.
type Result struct {
	Cutoff time.Time
	// Xid is the fence rows had to be below; LimitedBy names its checkpoint.
	Xid       uint64
	LimitedBy string
	// Deleted rows by row deletes, in Batches transactions.
	Deleted int64
	Batches int
	// Dropped partitions (their rows are not in Deleted); Kept names the
	// partitions past the cutoff that could not be dropped, and why.
	Dropped []Dropped
	Kept    []string
	// PrunedCheckpoints is the checkpoint rows older than the retention
	// removed first (see the package doc, "Replay window").
	PrunedCheckpoints int64
	Elapsed           time.Duration
	// WALBytes is the WAL the server wrote during the run (all sessions:
	// an upper bound of cleanup's own).
	WALBytes int64
	// Stopped is "max-duration" or "canceled" when the run ended early.
	Stopped string
	// Dry-run counts: rows older than the cutoff, those also below the
	// fence, and those that would be deleted (or dropped).
	Old, Confirmed, Eligible int64
}

// KeptOld is the rows older than the cutoff a dry run keeps (not yet
// confirmed, or dead-lettered).
func (r Result) KeptOld() int64 { return r.Old - r.Eligible }

// Run deletes (or, with DryRun, counts) the rows the rule allows. Errors
// that mean "not safe to decide" (no checkpoint, a foreign one) come
// before anything is deleted.
func (c *Cleaner) Run(ctx context.Context) (res Result, err error) {
	o := c.Options.WithDefaults()
	if err := o.Validate(); err != nil {
		return res, err
	}
	start := time.Now()
	schema, verr := migrations.Validate(ctx, c.DB, c.Table)
	if verr != nil {
		return res, verr
	}
	if !schema.HasCreatedAt {
		return res, fmt.Errorf("cleanup of %s refused: the table has no %q column, so no row's age is known; add it (timestamptz NOT NULL DEFAULT now())",
			c.Table, migrations.ColCreatedAt)
	}
	b, err := readBound(ctx, c.DB, c.Table, c.Slot, c.Identity, o.OlderThan)
	if err != nil {
		return res, err
	}
	res.Cutoff, res.Xid, res.LimitedBy = b.Cutoff, b.Xid, b.LimitedBy
	ls, err := leaves(ctx, c.DB, c.Table)
	if err != nil {
		return res, err
	}
	keyType, _, err := rangeKey(ctx, c.DB, c.Table)
	if err != nil {
		return res, err
	}
	if o.DryRun {
		err := c.count(ctx, ls, keyType, b, &res)
		res.Elapsed = time.Since(start)
		return res, err
	}
	walStart, _ := c.walLSN(ctx)
	defer func() {
		res.Elapsed = time.Since(start)
		if walEnd, err := c.walLSN(context.WithoutCancel(ctx)); err == nil && walStart != 0 {
			res.WALBytes = int64(walEnd) - int64(walStart)
		}
	}()
	if res.PrunedCheckpoints, err = pruneHistory(ctx, c.DB, c.Table, c.Slot, b); err != nil {
		return res, err
	}
	runCtx := ctx
	if o.MaxDuration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithDeadline(ctx, start.Add(o.MaxDuration))
		defer cancel()
	}
	for _, l := range ls {
		if err := c.cleanLeaf(runCtx, l, keyType, b, o, &res); err != nil {
			switch {
			case ctx.Err() != nil:
				res.Stopped = "canceled"
				return res, nil
			case runCtx.Err() != nil:
				res.Stopped = "max-duration"
				return res, nil
			}
			return res, err
		}
	}
	return res, nil
}

func (c *Cleaner) walLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := c.DB.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// cleanLeaf drops l whole when allowed, else deletes its rows in batches.
func (c *Cleaner) cleanLeaf(ctx context.Context, l leaf, keyType string, b Bound, o Options, res *Result) error {
	if l.Partition {
		v, err := checkDrop(ctx, c.DB, c.Table, l, keyType, b)
		if err != nil {
			return err
		}
		if v.ok {
			if v, err = dropPartition(ctx, c.DB, c.Table, l, keyType, b, lockTimeout); err != nil {
				return err
			}
		}
		if v.ok {
			res.Dropped = append(res.Dropped, Dropped{Partition: l.String(), Rows: v.rows})
			c.Log.Info("partition detached and dropped", slog.String("stage", "cleanup"), slog.String("partition", l.String()), slog.Int64("rows", v.rows))
			return nil
		}
		if v.candidate {
			res.Kept = append(res.Kept, l.String()+": "+v.reason)
			c.Log.Info("partition kept; deleting its confirmed rows", slog.String("stage", "cleanup"), slog.String("partition", l.String()), slog.String("reason", v.reason))
		}
	}
	return c.deleteRows(ctx, l, b, o, res)
}

// deleteRows walks l's heap in ranges of pages and deletes the rows the
// rule allows, at most BatchSize per transaction.
func (c *Cleaner) deleteRows(ctx context.Context, l leaf, b Bound, o Options, res *Result) error {
	var blocks, tuples, pages float64
	if err := c.DB.QueryRow(ctx, `SELECT pg_relation_size(c.oid) / current_setting('block_size')::int, c.reltuples, c.relpages
		FROM pg_class c WHERE c.oid = $1::regclass`, l.quoted()).Scan(&blocks, &tuples, &pages); err != nil {
		return fmt.Errorf("size of %s: %w", l, err)
	}
	perPage := 32.0
	if tuples > 0 && pages > 0 {
		perPage = max(tuples/pages, 1)
	}
	span := int64(max(float64(o.BatchSize)/perPage, 1))
	q := `DELETE FROM ` + l.quoted() + ` o WHERE o.ctid = ANY(ARRAY(
		SELECT i.ctid FROM ` + l.quoted() + ` i WHERE i.ctid >= $4::tid AND i.ctid < $5::tid AND ` + eligibleCond(c.Table, "i") + `
		LIMIT $6)) AND ` + confirmedCond
	w := walker{blocks: int64(blocks), span: span, batch: int64(o.BatchSize), pause: o.Pause}
	return w.run(ctx, func(ctx context.Context, from, to int64) (int64, error) {
		args := append(ruleArgs(b, c.Table), fmt.Sprintf("(%d,0)", from), fmt.Sprintf("(%d,0)", to), o.BatchSize)
		n, err := c.batch(ctx, q, args)
		if err != nil {
			return 0, fmt.Errorf("delete from %s (pages %d-%d): %w%s", l, from, to, err, privilegeHint(err, c.Table))
		}
		if n > 0 {
			res.Deleted += n
			res.Batches++
			if c.OnDelete != nil {
				c.OnDelete(n)
			}
		}
		return n, nil
	})
}

// privilegeHint says how to fix a missing privilege: the relay's
// least-privilege role has no DELETE on the outbox.
func privilegeHint(err error, t migrations.Table) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return fmt.Sprintf("; fix: GRANT DELETE ON %s TO the relay's role (dropping partitions needs the table's owner), "+
			"or run outbox-relay cleanup as the table owner instead of the leader's schedule", t.Quoted())
	}
	return ""
}

// batch runs one DELETE in its own short transaction.
func (c *Cleaner) batch(ctx context.Context, q string, args []any) (int64, error) {
	tx, err := c.DB.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after commit
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, lockTimeout.Milliseconds())); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// walker visits the page ranges [from, to) of a heap of blocks pages, span
// pages at a time; a range that yields a full batch is visited again (more
// may be left), and every batch that deleted rows is followed by the pause.
type walker struct {
	blocks, span, batch int64
	pause               time.Duration
}

func (w walker) run(ctx context.Context, step func(ctx context.Context, from, to int64) (int64, error)) error {
	for from := int64(0); from < w.blocks; {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := from + w.span
		n, err := step(ctx, from, to)
		if err != nil {
			return err
		}
		if n < w.batch {
			from = to
		}
		if n > 0 && w.pause > 0 {
			t := time.NewTimer(w.pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return nil
}

// count fills the dry-run counts of res.
func (c *Cleaner) count(ctx context.Context, ls []leaf, keyType string, b Bound, res *Result) error {
	for _, l := range ls {
		var old, confirmed, eligible int64
		err := c.DB.QueryRow(ctx, `SELECT count(*) FILTER (WHERE o.created_at < $1),
				count(*) FILTER (WHERE `+confirmedCond+`), count(*) FILTER (WHERE `+eligibleCond(c.Table, "o")+`)
			FROM `+l.quoted()+` o`, ruleArgs(b, c.Table)...).Scan(&old, &confirmed, &eligible)
		if err != nil {
			return fmt.Errorf("count %s: %w", l, err)
		}
		res.Old += old
		res.Confirmed += confirmed
		res.Eligible += eligible
		if l.Partition {
			v, err := checkDrop(ctx, c.DB, c.Table, l, keyType, b)
			if err != nil {
				return err
			}
			if v.ok {
				res.Dropped = append(res.Dropped, Dropped{Partition: l.String(), Rows: v.rows})
			}
		}
	}
	return nil
}
