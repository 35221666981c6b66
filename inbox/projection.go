package inbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/record"
)

// Execer is what ApplyNewer needs: a pgx.Tx, *pgx.Conn or *pgxpool.Pool.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Projection describes a table that holds the latest state of each
// aggregate, guarded by the aggregate_version of the event that wrote it.
type Projection struct {
	Table         string // [schema.]name, unquoted identifiers
	KeyColumn     string // primary key (or unique) column: the aggregate id
	VersionColumn string // bigint: aggregate_version of the last applied event
}

// ApplyNewer upserts the aggregate's row with the given column values only
// if ev.AggregateVersion is higher than the stored version:
//
//	INSERT INTO t (key, version, c1, …) VALUES (…)
//	ON CONFLICT (key) DO UPDATE SET version = EXCLUDED.version, c1 = EXCLUDED.c1, …
//	WHERE t.version < EXCLUDED.version
//
// It reports whether the row changed. A duplicate or an older event is a
// no-op, so a projection of this kind needs no inbox: it converges to the
// latest state whatever the redeliveries.
//
// It is enough only when each event carries the complete new value of
// every column it sets (a state snapshot) and nothing else happens. It is
// NOT enough for: increments or other deltas (a skipped older event loses
// its change); effects with side records (an order line, a ledger entry,
// a shipment) that must exist exactly once; calls to other systems (use
// an idempotency key, the event ID, at the receiver); or projections that
// need every version in sequence (a gap after a dead-lettered event is
// silently jumped over). Use the inbox (Handler) for those.
func ApplyNewer(ctx context.Context, db Execer, p Projection, ev *record.Event, columns map[string]any) (bool, error) {
	for _, id := range append([]string{p.KeyColumn, p.VersionColumn}, keys(columns)...) {
		if err := validIdent(id); err != nil {
			return false, fmt.Errorf("inbox: projection column %w", err)
		}
	}
	table, err := quoteTable(p.Table)
	if err != nil {
		return false, err
	}
	cols := []string{pgx.Identifier{p.KeyColumn}.Sanitize(), pgx.Identifier{p.VersionColumn}.Sanitize()}
	args := []any{ev.AggregateID, ev.AggregateVersion}
	sets := []string{cols[1] + " = EXCLUDED." + cols[1]}
	for _, k := range keys(columns) {
		q := pgx.Identifier{k}.Sanitize()
		cols = append(cols, q)
		args = append(args, columns[k])
		sets = append(sets, q+" = EXCLUDED."+q)
	}
	ph := make([]string, len(cols))
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	sql := "INSERT INTO " + table + " AS t (" + strings.Join(cols, ", ") + ") VALUES (" + strings.Join(ph, ", ") + ")" +
		" ON CONFLICT (" + cols[0] + ") DO UPDATE SET " + strings.Join(sets, ", ") +
		" WHERE t." + cols[1] + " < EXCLUDED." + cols[1]
	tag, err := db.Exec(ctx, sql, args...)
	if err != nil {
		return false, fmt.Errorf("inbox: apply %s version %d to %s: %w", ev.AggregateID, ev.AggregateVersion, p.Table, err)
	}
	return tag.RowsAffected() == 1, nil
}

// keys returns the map's keys sorted, for stable SQL text.
func keys(m map[string]any) []string { return slices.Sorted(maps.Keys(m)) }

func quoteTable(s string) (string, error) {
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("inbox: projection table %q: use name or schema.name", s)
	}
	for _, p := range parts {
		if err := validIdent(p); err != nil {
			return "", fmt.Errorf("inbox: projection table %w", err)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}
