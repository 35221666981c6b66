//go:build integration

package outbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestTransitionExamplesRun runs the go doc examples of Writer.Transition
// (pgx and database/sql) against the stack, in a schema of their own
// (search_path in DATABASE_URL, OUTBOX_TABLE), and checks what they print
// and what they wrote: one event per example, at version 2.
func TestTransitionExamplesRun(t *testing.T) {
	base := os.Getenv("OUTBOX_RELAY_DATABASE_URL")
	if base == "" {
		t.Skip("OUTBOX_RELAY_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close) // after the schema is dropped (cleanups run last first)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "outbox_example_" + hex.EncodeToString(b)
	table := migrations.Table{Schema: schema, Name: "outbox"}
	q := pgx.Identifier{schema}.Sanitize()
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+q+` CASCADE`); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	if _, err := pool.Exec(ctx, `CREATE SCHEMA `+q+`; CREATE TABLE `+q+`.orders (id text PRIMARY KEY, status text NOT NULL, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	params := u.Query()
	params.Set("search_path", schema) // a run-time parameter: unqualified "orders" is the schema's
	u.RawQuery = params.Encode()
	t.Setenv("DATABASE_URL", u.String())
	t.Setenv("OUTBOX_TABLE", table.String())

	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"pgx", ExampleWriter_Transition, "confirmed, event at version 2\nalready confirmed: no event written\n"},
		{"database/sql", ExampleWriter_Transition_databaseSQL, "confirmed, event at version 2\norder is not pending: no event written\n"},
	} {
		if got := captureStdout(t, ex.run); got != ex.want {
			t.Errorf("%s example printed %q, want %q", ex.name, got, ex.want)
		}
	}
	var events, orders int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+table.Quoted()+` WHERE event_type = 'order.confirmed' AND aggregate_version = 2),
		(SELECT count(*) FROM `+q+`.orders WHERE status = 'confirmed' AND version = 2)`).Scan(&events, &orders); err != nil {
		t.Fatal(err)
	}
	if events != 2 || orders != 2 {
		t.Fatalf("after both examples: %d events at version 2, %d confirmed orders; want 2 and 2", events, orders)
	}
}

// captureStdout returns what f prints to os.Stdout.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() {
		var buf bytes.Buffer
		_, _ = io.Copy(&buf, r)
		done <- buf.Bytes()
	}()
	defer func() { os.Stdout = saved }()
	f()
	_ = w.Close()
	return string(<-done)
}
