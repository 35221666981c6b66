package migrations

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the read-only subset of *pgx.Conn, *pgxpool.Pool and pgx.Tx
// that Validate needs. Accepting an interface lets callers validate on
// whatever they already hold, including inside their own transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Execer is what Apply needs: queries, statements and the ability to start
// a transaction, because each migration runs in a transaction of its own.
// *pgx.Conn and *pgxpool.Pool satisfy it; so does pgx.Tx, in which case
// every migration becomes a savepoint and nothing is committed (and the
// advisory lock is not released) until the caller commits.
type Execer interface {
	Querier
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Begin(ctx context.Context) (pgx.Tx, error)
}
