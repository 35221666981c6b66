//go:build integration

package migrations

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// testPool connects to OUTBOX_RELAY_DATABASE_URL or skips the test.
func testPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := os.Getenv("OUTBOX_RELAY_DATABASE_URL")
	if url == "" {
		t.Skip("OUTBOX_RELAY_DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// testSchema returns a fresh schema name, dropped when the test ends, so
// tests never touch the real public.outbox or each other.
func testSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "mig_test_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// allVersions lists every embedded migration's version, so the tests
// follow new migrations instead of pinning a count.
func allVersions(t *testing.T) []int {
	t.Helper()
	migs, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, m := range migs {
		out = append(out, m.version)
	}
	return out
}

func TestIntegrationApplyFreshAndIdempotent(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	tbl := Table{Schema: testSchema(t, pool), Name: "outbox"}

	applied, err := Apply(ctx, pool, tbl, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if all := allVersions(t); !slices.Equal(applied, all) {
		t.Fatalf("first Apply applied %v, want %v", applied, all)
	}
	s, err := Validate(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if s != (Schema{PayloadType: "jsonb", HasHeaders: true, HasCreatedAt: true}) {
		t.Fatalf("Schema = %+v", s)
	}

	applied, err = Apply(ctx, pool, tbl, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Apply applied %v, want none", applied)
	}

	var n int
	err = pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.sibling(VersionTableName).Quoted()+
		" WHERE table_name = $1 AND version = 1 AND applied_at <= now()", tbl.Name).Scan(&n)
	if err != nil || n != 1 {
		t.Fatalf("version rows = %d, %v; want 1", n, err)
	}
}

func TestIntegrationApplyWithConn(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	tbl := Table{Schema: testSchema(t, pool), Name: "events"}
	conn, err := pgx.Connect(ctx, os.Getenv("OUTBOX_RELAY_DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := Apply(ctx, conn, tbl, ApplyOptions{PayloadType: "bytea"}); err != nil {
		t.Fatal(err)
	}
	s, err := Validate(ctx, conn, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if s.PayloadType != "bytea" {
		t.Fatalf("PayloadType = %q, want bytea", s.PayloadType)
	}
}

func TestIntegrationApplyConcurrent(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	tbl := Table{Schema: testSchema(t, pool), Name: "outbox"}

	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		results [][]int
		errs    []error
	)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied, err := Apply(ctx, pool, tbl, ApplyOptions{})
			mu.Lock()
			defer mu.Unlock()
			results = append(results, applied)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("concurrent Apply failed: %v", errs)
	}
	// Each migration runs in its own locked transaction, so concurrent
	// callers may share the work; every version must run exactly once.
	var got []int
	for _, r := range results {
		got = append(got, r...)
	}
	slices.Sort(got)
	if want := allVersions(t); !slices.Equal(got, want) {
		t.Fatalf("%d concurrent Apply calls applied %v together (%v), want each of %v exactly once", n, got, results, want)
	}
}

func TestIntegrationApplyExistingUserTable(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	schema := testSchema(t, pool)
	tbl := Table{Schema: schema, Name: "outbox"}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	// A hand-made table using the alternative accepted types, no optional
	// columns and an extra column of its own.
	_, err := pool.Exec(ctx, `CREATE TABLE `+tbl.Quoted()+` (
		event_id uuid PRIMARY KEY, aggregate_type varchar(100), aggregate_id varchar,
		aggregate_version int8, event_type varchar, schema_version int8, payload text,
		tenant text)`)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := Apply(ctx, pool, tbl, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if all := allVersions(t); !slices.Equal(applied, all) {
		t.Fatalf("applied %v, want %v", applied, all)
	}
	s, err := Validate(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	if s != (Schema{PayloadType: "text"}) {
		t.Fatalf("Schema = %+v", s)
	}
}

func TestIntegrationApplyRejectsBadTable(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	schema := testSchema(t, pool)
	tbl := Table{Schema: schema, Name: "outbox"}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `CREATE TABLE `+tbl.Quoted()+` (
		event_id uuid, aggregate_type text, aggregate_version text, event_type text,
		schema_version int, payload jsonb, headers text)`)
	if err != nil {
		t.Fatal(err)
	}
	applied, err := Apply(ctx, pool, tbl, ApplyOptions{})
	if len(applied) != 0 {
		t.Fatalf("applied %v on a bad table", applied)
	}
	var se *SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("err = %v, want *SchemaError", err)
	}
	for _, want := range []string{
		`missing column "aggregate_id"`,
		`column "aggregate_version" has type text, want bigint`,
		`column "headers" has type text, want jsonb or json`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.sibling(VersionTableName).Quoted()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("bad table recorded as migrated: %d rows, %v", n, err)
	}
}

func TestIntegrationValidateMissing(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	schema := testSchema(t, pool)

	// Schema does not exist either.
	tbl := Table{Schema: schema, Name: "outbox"}
	_, err := Validate(ctx, pool, tbl)
	want := `table ` + schema + `.outbox does not exist (run "outbox-relay migrate")`
	var se *SchemaError
	if !errors.As(err, &se) || !se.TableMissing || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}

	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := Validate(ctx, pool, tbl); err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %q", err, want)
	}

	if _, err := pool.Exec(ctx, "CREATE VIEW "+tbl.Quoted()+" AS SELECT 1 AS x"); err != nil {
		t.Fatal(err)
	}
	if _, err := Validate(ctx, pool, tbl); err == nil || !strings.Contains(err.Error(), "is a view, not a table") {
		t.Fatalf("view: err = %v", err)
	}
}

func TestIntegrationApplyAfterDrop(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	tbl := Table{Schema: testSchema(t, pool), Name: "outbox"}
	if _, err := Apply(ctx, pool, tbl, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP TABLE "+tbl.Quoted()); err != nil {
		t.Fatal(err)
	}
	applied, err := Apply(ctx, pool, tbl, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Dropping the outbox table forgets its version rows: every migration
	// runs again (idempotently for the tables that survived the drop).
	if all := allVersions(t); !slices.Equal(applied, all) {
		t.Fatalf("applied %v after drop, want %v", applied, all)
	}
	if _, err := Validate(ctx, pool, tbl); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationTwoTablesOneSchema(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	schema := testSchema(t, pool)
	for _, name := range []string{"outbox_a", "outbox_b"} {
		applied, err := Apply(ctx, pool, Table{Schema: schema, Name: name}, ApplyOptions{})
		if err != nil || !slices.Equal(applied, allVersions(t)) {
			t.Fatalf("%s: applied %v, %v", name, applied, err)
		}
	}
}

// TestIntegrationSecondTableLeavesSharedTablesUnlocked: migrating a second
// outbox table of a schema must not lock the schema's shared checkpoint and
// dead-letter tables against the relays writing there. A writer holds
// ROW EXCLUSIVE on both (as a checkpoint save and a dead-letter insert do)
// while the second table is migrated under a short lock_timeout; an ALTER
// TABLE or CREATE INDEX on a shared table, even one IF NOT EXISTS makes a
// no-op, would wait for the writer and fail.
func TestIntegrationSecondTableLeavesSharedTablesUnlocked(t *testing.T) {
	ctx := testCtx(t)
	pool := testPool(t)
	schema := testSchema(t, pool)
	first := Table{Schema: schema, Name: "outbox_a"}
	if _, err := Apply(ctx, pool, first, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.Background()) //nolint:errcheck // the test only needs the locks
	for _, shared := range []Table{CheckpointTable(first), DeadLetterTable(first)} {
		if _, err := writer.Exec(ctx, "LOCK TABLE "+shared.Quoted()+" IN ROW EXCLUSIVE MODE"); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET lock_timeout = '2s'"); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "RESET lock_timeout") //nolint:errcheck // back to the pool as it came
	second := Table{Schema: schema, Name: "outbox_b"}
	applied, err := Apply(ctx, conn.Conn(), second, ApplyOptions{})
	if err != nil {
		t.Fatalf("migrating %s while the shared tables are written: %v", second, err)
	}
	if !slices.Equal(applied, allVersions(t)) {
		t.Fatalf("%s: applied %v", second, applied)
	}
}
