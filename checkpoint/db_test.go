package checkpoint

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// dbEnv is one test's isolated schema on the local stack's database.
type dbEnv struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	tbl   migrations.Table
	store *Store // of tbl and slot "outbox_relay"
}

// newEmptyDBEnv skips t unless the local stack is configured; otherwise it
// reserves a schema of its own (dropped at the end, not created). The test
// runs in parallel with others.
func newEmptyDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	s := testenv.Reserve(t)
	tbl := migrations.Table{Schema: s.Schema, Name: "outbox"}
	return &dbEnv{ctx: s.Ctx, pool: s.Pool, tbl: tbl, store: NewStore(s.Pool, tbl, "outbox_relay")}
}

// newDBEnv is newEmptyDBEnv with the project's migrations applied.
func newDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	e := newEmptyDBEnv(t)
	if _, err := migrations.Apply(e.ctx, e.pool, e.tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *dbEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// cpTable is the quoted checkpoint table.
func (e *dbEnv) cpTable() string { return migrations.CheckpointTable(e.tbl).Quoted() }

// rows counts the checkpoint rows of the env's outbox table and slot.
func (e *dbEnv) rows(t *testing.T, slot string) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM `+e.cpTable()+` WHERE outbox_table = $1 AND slot = $2`,
		e.tbl.String(), slot).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// age makes every row of the table older by d, as if saved d ago.
func (e *dbEnv) age(t *testing.T, d time.Duration) {
	t.Helper()
	e.exec(t, `UPDATE `+e.cpTable()+` SET started_at = started_at - make_interval(secs => $1),
		saved_at = saved_at - make_interval(secs => $1)`, d.Seconds())
}

func (e *dbEnv) save(t *testing.T, s *Store, cp Checkpoint, retention time.Duration) {
	t.Helper()
	if err := s.Save(e.ctx, cp, retention); err != nil {
		t.Fatal(err)
	}
}

func (e *dbEnv) latest(t *testing.T) Checkpoint {
	t.Helper()
	cp, err := e.store.Latest(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// replConn opens a replication connection (replication=database) to the
// test database, closed when t ends.
func (e *dbEnv) replConn(t *testing.T) *pgconn.PgConn {
	t.Helper()
	cfg := e.pool.Config().ConnConfig.Config.Copy()
	cfg.RuntimeParams["replication"] = "database"
	conn, err := pgconn.ConnectConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
