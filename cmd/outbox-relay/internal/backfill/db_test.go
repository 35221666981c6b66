package backfill

import (
	"context"
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// dbEnv is one test's isolated schema on the local stack's database.
type dbEnv struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	tbl    migrations.Table
	schema migrations.Schema
}

// newEmptyDBEnv skips t unless the local stack is configured; otherwise it
// reserves a schema name of its own (the schema is dropped at the end, but
// not created). The test runs in parallel with others.
func newEmptyDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	s := testenv.Reserve(t)
	return &dbEnv{ctx: s.Ctx, pool: s.Pool, tbl: migrations.Table{Schema: s.Schema, Name: "outbox"}}
}

// newDBEnv is newEmptyDBEnv with the project's migrations applied.
func newDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	e := newEmptyDBEnv(t)
	e.migrate(t)
	return e
}

// migrate applies the migrations to the env's table (creating it unless it
// exists) and records its schema.
func (e *dbEnv) migrate(t *testing.T) {
	t.Helper()
	if _, err := migrations.Apply(e.ctx, e.pool, e.tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	s, err := migrations.Validate(e.ctx, e.pool, e.tbl)
	if err != nil {
		t.Fatal(err)
	}
	e.schema = s
}

func (e *dbEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// insert adds one row (in its own transaction when db is the pool) and
// returns its event id.
func (e *dbEnv) insert(t *testing.T, db execer, typ, agg string, version int64, evType string, headers any) string {
	t.Helper()
	id := uuid.NewString()
	_, err := db.Exec(e.ctx, `INSERT INTO `+e.tbl.Quoted()+` (event_id, aggregate_type, aggregate_id, aggregate_version,
		event_type, schema_version, payload, headers) VALUES ($1, $2, $3, $4, $5, 1, jsonb_build_object('v', $4::bigint), $6)`,
		id, typ, agg, version, evType, headers)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (e *dbEnv) source(mark string) *Source {
	return &Source{Table: e.tbl, Schema: e.schema, Mark: mark}
}

// scan returns the events of w and checks that Count agrees.
func (e *dbEnv) scan(t *testing.T, s *Source, w Selection) []*replication.WALEvent {
	t.Helper()
	var out []*replication.WALEvent
	if err := s.Scan(e.ctx, e.pool, w, func(ev *replication.WALEvent) error {
		out = append(out, ev)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Count(e.ctx, e.pool, w)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(out)) {
		t.Fatalf("Count = %d, Scan read %d", n, len(out))
	}
	return out
}

func eventIDs(evs []*replication.WALEvent) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.EventID
	}
	return out
}

// has reports whether evs hold every id of want.
func has(evs []*replication.WALEvent, want ...string) bool {
	got := eventIDs(evs)
	for _, id := range want {
		if !slices.Contains(got, id) {
			return false
		}
	}
	return true
}
