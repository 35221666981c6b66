package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Pool connects to the test database, or skips tb when none is set; the
// pool is closed when tb ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), DatabaseURL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Schema creates a schema named prefix_<random> and drops it, with all it
// holds, when tb ends: tests that share the stack (and run in parallel
// with other helpers' tests) never see each other's tables.
func Schema(tb testing.TB, pool *pgxpool.Pool, prefix string) string {
	tb.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := prefix + "_" + hex.EncodeToString(b)
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := pool.Exec(context.Background(), `CREATE SCHEMA `+quoted); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+quoted+` CASCADE`)
	})
	return name
}
