package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

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

// Scratch is what a parallel database test gets from Reserve: a small pool
// and the name of a schema of its own, not created yet (migrations create
// it) and dropped with all it holds when the test ends.
type Scratch struct {
	Ctx    context.Context
	Pool   *pgxpool.Pool
	Schema string
}

// Reserve skips t unless the stack is configured; otherwise it marks t
// parallel and returns a Scratch whose context ends after 30 s.
func Reserve(t *testing.T) Scratch {
	t.Helper()
	url := DatabaseURL(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		defer pool.Close()
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return Scratch{Ctx: ctx, Pool: pool, Schema: name}
}
