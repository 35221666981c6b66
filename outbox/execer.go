package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Execer runs one SQL statement with positional arguments ($1, $2, ...) in
// the caller's transaction. It is deliberately tiny so that pgx and
// database/sql transactions (and test fakes) can all provide it; use
// PgxTx or SQLTx to adapt a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) error
}

// Tx is what Writer.Transition needs from the caller's transaction: Exec
// for the outbox insert, and Change for the conditional state change
// whose outcome decides whether the event is written. PgxTx and SQLTx
// return one; a test fake can implement it too. Append and AppendBatch
// accept it as well, since it is an Execer.
type Tx interface {
	Execer
	// Change runs one data-changing statement (UPDATE, DELETE, INSERT,
	// possibly inside a WITH) and reports how many rows it changed. When
	// the statement returns a column (RETURNING), returned holds that
	// column's value for each changed row, as int64, and rows equals
	// len(returned); without RETURNING, returned is nil and rows is the
	// rows-affected count of the command. A statement returning more than
	// one column, or a non-integer one, is an error.
	Change(ctx context.Context, sql string, args ...any) (rows int64, returned []int64, err error)
}

// PgxTx adapts a pgx transaction (from *pgx.Conn or *pgxpool.Pool Begin).
// It takes a pgx.Tx rather than anything with an Exec method on purpose:
// appending outside a transaction would lose the outbox guarantee.
func PgxTx(tx pgx.Tx) Tx {
	return pgxExecer{tx: tx}
}

type pgxExecer struct{ tx pgx.Tx }

func (p pgxExecer) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := p.tx.Exec(ctx, sql, args...)
	return err
}

// Change runs the statement as a query, so pgx tells from the result
// itself whether it returns a column: no parsing of the SQL text.
func (p pgxExecer) Change(ctx context.Context, sql string, args ...any) (int64, []int64, error) {
	rows, err := p.tx.Query(ctx, sql, args...)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var returned []int64
	for rows.Next() {
		if n := len(rows.FieldDescriptions()); n != 1 {
			return 0, nil, fmt.Errorf("%w: the statement returns %d columns, want one bigint (RETURNING version)", errReturning, n)
		}
		var v int64
		if err := rows.Scan(&v); err != nil {
			return 0, nil, fmt.Errorf("%w: %w", errReturning, err)
		}
		returned = append(returned, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if returned != nil {
		return int64(len(returned)), returned, nil
	}
	// No row came back: either no RETURNING (the command tag counts the
	// changed rows) or RETURNING that matched nothing (the tag says 0).
	return rows.CommandTag().RowsAffected(), nil, nil
}

// SQLTx adapts a database/sql transaction. The statements use PostgreSQL's
// native $1, $2, ... placeholders, which PostgreSQL drivers for
// database/sql such as github.com/jackc/pgx/v5/stdlib (driver name "pgx")
// and lib/pq pass through unchanged; drivers that expect "?" are not
// supported.
//
// database/sql cannot report rows affected for a query, nor tell a query
// from a command before running it, so Change looks at the statement's
// text: one containing the keyword RETURNING (outside string literals,
// quoted identifiers and comments) runs as a query and must return one
// column; any other runs as a command and its rows-affected count is used.
func SQLTx(tx *sql.Tx) Tx {
	return sqlExecer{tx: tx}
}

type sqlExecer struct{ tx *sql.Tx }

func (s sqlExecer) Exec(ctx context.Context, query string, args ...any) error {
	_, err := s.tx.ExecContext(ctx, query, args...)
	return err
}

func (s sqlExecer) Change(ctx context.Context, query string, args ...any) (int64, []int64, error) {
	if !hasReturning(query) {
		res, err := s.tx.ExecContext(ctx, query, args...)
		if err != nil {
			return 0, nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, nil, fmt.Errorf("rows affected: %w", err)
		}
		return n, nil, nil
	}
	rows, err := s.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = rows.Close() }()
	cols, err := rows.Columns()
	if err != nil {
		return 0, nil, err
	}
	if len(cols) != 1 {
		// Zero columns: RETURNING only inside a WITH, and database/sql has
		// no way to count the rows the outer command changed.
		return 0, nil, fmt.Errorf("%w: the statement contains RETURNING but returns %d columns, want one bigint (RETURNING version)", errReturning, len(cols))
	}
	var returned []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return 0, nil, fmt.Errorf("%w: %w", errReturning, err)
		}
		returned = append(returned, v)
	}
	if err := rows.Err(); err != nil {
		return 0, nil, err
	}
	if err := rows.Close(); err != nil {
		return 0, nil, err
	}
	return int64(len(returned)), returned, nil
}

// errReturning marks a RETURNING clause Transition cannot use.
var errReturning = errors.New("RETURNING must return one bigint column")

// hasReturning reports whether the SQL text contains the keyword RETURNING
// outside string literals ('...', E'...', $tag$...$tag$), quoted
// identifiers and comments. Parameters ($1) and identifiers that merely
// contain the word (returning_at) do not count.
func hasReturning(s string) bool {
	isIdentStart := func(c byte) bool {
		return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') || c >= 0x80
	}
	isIdent := func(c byte) bool { return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$' }
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(s) && s[i+1] == '*':
			// Block comments nest in PostgreSQL.
			depth := 1
			for i += 2; i < len(s) && depth > 0; {
				switch {
				case strings.HasPrefix(s[i:], "/*"):
					depth++
					i += 2
				case strings.HasPrefix(s[i:], "*/"):
					depth--
					i += 2
				default:
					i++
				}
			}
		case c == '\'':
			// E'...' allows backslash escapes; the E was read as a word
			// just before, so look back.
			escapes := i > 0 && (s[i-1] == 'e' || s[i-1] == 'E') && (i < 2 || !isIdent(s[i-2]))
			i = skipQuoted(s, i, '\'', escapes)
		case c == '"':
			i = skipQuoted(s, i, '"', false)
		case c == '$':
			// $1 is a parameter; $tag$ or $$ opens a dollar-quoted string.
			j := i + 1
			if j < len(s) && s[j] >= '0' && s[j] <= '9' {
				i = j
				continue
			}
			for j < len(s) && isIdent(s[j]) && s[j] != '$' {
				j++
			}
			if j < len(s) && s[j] == '$' {
				tag := s[i : j+1]
				end := strings.Index(s[j+1:], tag)
				if end < 0 {
					return false // unterminated: PostgreSQL will reject it anyway
				}
				i = j + 1 + end + len(tag)
			} else {
				i = j
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			if j-i == len("returning") && strings.EqualFold(s[i:j], "returning") {
				return true
			}
			i = j
		default:
			i++
		}
	}
	return false
}

// skipQuoted returns the index just past the quoted text starting at
// s[i] == q; a doubled quote is an escaped quote.
func skipQuoted(s string, i int, q byte, backslash bool) int {
	for i++; i < len(s); i++ {
		switch {
		case backslash && s[i] == '\\':
			i++
		case s[i] == q:
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return len(s)
}
