//go:build integration

package integration

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is a minimal connection pool over pgx.Conn (pgxpool's dependency is not
// in go.sum, and this directory must not change the module files).
type DB struct {
	url string

	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool
}

// OpenDB returns a pool for url after checking one connection works.
func OpenDB(ctx context.Context, url string) (*DB, error) {
	d := &DB{url: url}
	c, err := d.acquire(ctx)
	if err != nil {
		return nil, err
	}
	d.release(c)
	return d, nil
}

func (d *DB) acquire(ctx context.Context) (*pgx.Conn, error) {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		c := d.idle[n-1]
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		return c, nil
	}
	d.mu.Unlock()
	return pgx.Connect(ctx, d.url)
}

func (d *DB) release(c *pgx.Conn) {
	if c.IsClosed() || c.PgConn().TxStatus() != 'I' {
		c.Close(context.Background())
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || len(d.idle) >= 16 {
		c.Close(context.Background())
		return
	}
	d.idle = append(d.idle, c)
}

// Close closes idle connections; connections in use are closed on release.
func (d *DB) Close() {
	d.mu.Lock()
	idle := d.idle
	d.idle = nil
	d.closed = true
	d.mu.Unlock()
	for _, c := range idle {
		c.Close(context.Background())
	}
}

// Exec runs sql on a pooled connection.
func (d *DB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := d.acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer d.release(c)
	return c.Exec(ctx, sql, args...)
}

type dbRow struct {
	d    *DB
	ctx  context.Context
	sql  string
	args []any
}

func (r dbRow) Scan(dest ...any) error {
	c, err := r.d.acquire(r.ctx)
	if err != nil {
		return err
	}
	defer r.d.release(c)
	return c.QueryRow(r.ctx, r.sql, r.args...).Scan(dest...)
}

// QueryRow runs sql when the returned row is scanned.
func (d *DB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return dbRow{d, ctx, sql, args}
}

// WithConn runs f on a pooled connection.
func (d *DB) WithConn(ctx context.Context, f func(*pgx.Conn) error) error {
	c, err := d.acquire(ctx)
	if err != nil {
		return err
	}
	defer d.release(c)
	return f(c)
}

// Tx is a transaction on a pooled connection, released by Commit/Rollback.
type Tx struct {
	pgx.Tx
	d    *DB
	c    *pgx.Conn
	done bool
}

// Begin starts a transaction.
func (d *DB) Begin(ctx context.Context) (*Tx, error) {
	c, err := d.acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		d.release(c)
		return nil, err
	}
	return &Tx{Tx: tx, d: d, c: c}, nil
}

func (t *Tx) finish() {
	if !t.done {
		t.done = true
		t.d.release(t.c)
	}
}

// Commit commits and releases the connection.
func (t *Tx) Commit(ctx context.Context) error {
	if t.done {
		return pgx.ErrTxClosed
	}
	defer t.finish()
	return t.Tx.Commit(ctx)
}

// Rollback rolls back (no-op when finished) and releases the connection.
func (t *Tx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	defer t.finish()
	return t.Tx.Rollback(ctx)
}
