package cleanup

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// leaf is one relation holding outbox rows: the table itself, or a leaf
// partition of a partitioned outbox.
type leaf struct {
	Schema, Name string
	// Partition is true for a partition; Bound is its partition bound as
	// pg_get_expr renders it ("FOR VALUES FROM (...) TO (...)", "DEFAULT").
	Partition bool
	Bound     string
	// Direct is true for a partition of the outbox table itself (not of a
	// sub-partitioned child): only those are detached and dropped.
	Direct bool
}

func (l leaf) quoted() string { return pgx.Identifier{l.Schema, l.Name}.Sanitize() }
func (l leaf) String() string { return l.Schema + "." + l.Name }

// leaves lists the relations holding t's rows, oldest partition first
// (by name, which the usual naming schemes order by time).
func leaves(ctx context.Context, db DB, t migrations.Table) ([]leaf, error) {
	rows, err := db.Query(ctx, `SELECT n.nspname, c.relname, c.relispartition, coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
			coalesce(pt.parentrelid = $1::regclass, false)
		FROM pg_partition_tree($1::regclass) pt
		JOIN pg_class c ON c.oid = pt.relid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE pt.isleaf ORDER BY n.nspname, c.relname`, t.Quoted())
	if err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", t, err)
	}
	defer rows.Close()
	var out []leaf
	for rows.Next() {
		var l leaf
		if err := rows.Scan(&l.Schema, &l.Name, &l.Partition, &l.Bound, &l.Direct); err != nil {
			return nil, fmt.Errorf("list partitions of %s: %w", t, err)
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list partitions of %s: %w", t, err)
	}
	if len(out) == 0 { // a plain table: pg_partition_tree lists nothing
		out = []leaf{{Schema: t.Schema, Name: t.Name}}
	}
	return out, nil
}

// rangeKey returns the type of t's partition key when t is partitioned by
// range on created_at alone (the only layout whose partitions cleanup
// drops); ok is false otherwise.
func rangeKey(ctx context.Context, db DB, t migrations.Table) (typ string, ok bool, err error) {
	var strat, col string
	var natts int
	err = db.QueryRow(ctx, `SELECT pt.partstrat::text, pt.partnatts, coalesce(a.attname::text, ''), coalesce(format_type(a.atttypid, a.atttypmod), '')
		FROM pg_partitioned_table pt
		LEFT JOIN pg_attribute a ON a.attrelid = pt.partrelid AND a.attnum = pt.partattrs[0]
		WHERE pt.partrelid = $1::regclass`, t.Quoted()).Scan(&strat, &natts, &col, &typ)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read partition key of %s: %w", t, err)
	}
	return typ, strat == "r" && natts == 1 && col == migrations.ColCreatedAt, nil
}

var rangeBound = regexp.MustCompile(`^FOR VALUES FROM \((.*)\) TO \((.*)\)$`)

// upperBound extracts the literal upper bound of a single-column range
// partition bound; ok is false for DEFAULT, MAXVALUE and anything else.
func upperBound(bound string) (string, bool) {
	m := rangeBound.FindStringSubmatch(bound)
	if m == nil {
		return "", false
	}
	to := m[2]
	if len(to) < 2 || to[0] != '\'' || to[len(to)-1] != '\'' {
		return "", false // MAXVALUE, or not a single literal
	}
	inner := to[1 : len(to)-1]
	if strings.Contains(strings.ReplaceAll(inner, "''", ""), "'") {
		return "", false // more than one literal
	}
	return strings.ReplaceAll(inner, "''", "'"), true
}

// dropVerdict says whether a leaf may be dropped whole, or why not.
type dropVerdict struct {
	ok bool
	// candidate is true once the bound allowed the drop: the reason is
	// then worth reporting.
	candidate bool
	reason    string
	rows      int64
}

// checkDrop decides whether l can be dropped: a direct range partition on
// created_at whose upper bound is at or before the cutoff, all of whose
// rows pass the rule. keyType is rangeKey's type ("" when t is not
// partitioned that way).
func checkDrop(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, t migrations.Table, l leaf, keyType string, b Bound) (dropVerdict, error) {
	switch {
	case !l.Partition:
		return dropVerdict{reason: "not partitioned"}, nil
	case keyType == "":
		return dropVerdict{reason: "outbox not partitioned by range on created_at"}, nil
	case !l.Direct:
		return dropVerdict{reason: "sub-partition"}, nil
	case l.Bound == "DEFAULT":
		return dropVerdict{reason: "default partition"}, nil
	}
	upper, ok := upperBound(l.Bound)
	if !ok {
		return dropVerdict{reason: "upper bound is not a single value (" + l.Bound + ")"}, nil
	}
	var before bool
	var upperAt time.Time
	if err := q.QueryRow(ctx, `SELECT ($1::text)::`+keyType+` <= $2::timestamptz, (($1::text)::`+keyType+`)::timestamptz`, upper, b.Cutoff).
		Scan(&before, &upperAt); err != nil {
		return dropVerdict{}, fmt.Errorf("compare the bound of %s: %w", l, err)
	}
	if !before {
		return dropVerdict{reason: fmt.Sprintf("upper bound %s is after the cutoff", upperAt.UTC().Format(time.RFC3339))}, nil
	}
	var total, eligible int64
	if err := q.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE `+eligibleCond(t, "o")+`) FROM `+l.quoted()+` o`,
		ruleArgs(b, t)...).Scan(&total, &eligible); err != nil {
		return dropVerdict{}, fmt.Errorf("check the rows of %s: %w", l, err)
	}
	if eligible != total {
		return dropVerdict{candidate: true, rows: total, reason: fmt.Sprintf("%d of %d rows not yet confirmed or dead-lettered", total-eligible, total)}, nil
	}
	return dropVerdict{ok: true, candidate: true, rows: total}, nil
}

// dropPartition detaches and drops l in one short transaction: the rows
// are checked again under a SHARE lock (no insert can slip in), then
// DETACH and DROP take their ACCESS EXCLUSIVE locks, bounded by
// lock_timeout so producers are never queued behind a long wait.
func dropPartition(ctx context.Context, db DB, t migrations.Table, l leaf, keyType string, b Bound, lockTimeout time.Duration) (dropVerdict, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return dropVerdict{}, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after commit
	if _, err := tx.Exec(ctx, fmt.Sprintf(`SET LOCAL lock_timeout = '%dms'`, lockTimeout.Milliseconds())); err != nil {
		return dropVerdict{}, err
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE `+l.quoted()+` IN SHARE MODE`); err != nil {
		return dropVerdict{candidate: true, reason: "lock not granted within lock_timeout: " + err.Error()}, nil
	}
	v, err := checkDrop(ctx, tx, t, l, keyType, b)
	if err != nil || !v.ok {
		return v, err
	}
	if _, err := tx.Exec(ctx, `ALTER TABLE `+t.Quoted()+` DETACH PARTITION `+l.quoted()); err != nil {
		return dropVerdict{candidate: true, reason: "detach failed: " + err.Error()}, nil
	}
	if _, err := tx.Exec(ctx, `DROP TABLE `+l.quoted()); err != nil {
		return dropVerdict{candidate: true, reason: "drop failed: " + err.Error()}, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return dropVerdict{candidate: true, reason: "commit failed: " + err.Error()}, nil
	}
	return v, nil
}
