package migrations

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// RowQuerier is the single-row query of *pgx.Conn, *pgxpool.Pool and
// pgx.Tx.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Added names the columns a migration added to a relay-owned table.
type Added struct {
	Migration int
	Columns   []string
}

// CheckTable verifies that a relay-owned table (the quoted name table,
// described as what: "checkpoint table") exists and has the columns of
// every migration in added, so that a relay started against an older
// schema stops with "run outbox-relay migrate" instead of failing at its
// first write.
func CheckTable(ctx context.Context, db RowQuerier, what, table string, added ...Added) error {
	var exists bool
	var have []string
	err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, coalesce(array_agg(attname::text), '{}')
		FROM pg_attribute WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped`, table).Scan(&exists, &have)
	switch {
	case err != nil:
		return fmt.Errorf("check %s: %w", what, err)
	case !exists:
		return fmt.Errorf("%s %s does not exist (run \"outbox-relay migrate\")", what, table)
	}
	for _, a := range added {
		var missing []string
		for _, c := range a.Columns {
			if !slices.Contains(have, c) {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%s %s has no column %s (migration %d): run \"outbox-relay migrate\"",
				what, table, strings.Join(missing, ", "), a.Migration)
		}
	}
	return nil
}
