package outbox

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
)

// Execer runs one SQL statement with positional arguments ($1, $2, ...) in
// the caller's transaction. It is deliberately tiny so that pgx and
// database/sql transactions (and test fakes) can all provide it; use
// PgxTx or SQLTx to adapt a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) error
}

// PgxTx adapts a pgx transaction (from *pgx.Conn or *pgxpool.Pool Begin).
// It takes a pgx.Tx rather than anything with an Exec method on purpose:
// appending outside a transaction would lose the outbox guarantee.
func PgxTx(tx pgx.Tx) Execer {
	return pgxExecer{tx: tx}
}

type pgxExecer struct{ tx pgx.Tx }

func (p pgxExecer) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := p.tx.Exec(ctx, sql, args...)
	return err
}

// SQLTx adapts a database/sql transaction. The statements use PostgreSQL's
// native $1, $2, ... placeholders, which PostgreSQL drivers for
// database/sql such as github.com/jackc/pgx/v5/stdlib (driver name "pgx")
// and lib/pq pass through unchanged; drivers that expect "?" are not
// supported.
func SQLTx(tx *sql.Tx) Execer {
	return sqlExecer{tx: tx}
}

type sqlExecer struct{ tx *sql.Tx }

func (s sqlExecer) Exec(ctx context.Context, query string, args ...any) error {
	_, err := s.tx.ExecContext(ctx, query, args...)
	return err
}
