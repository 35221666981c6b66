package deadletter

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// errNoDB is what noDB returns: the code under test was not supposed to
// reach the database at all.
var errNoDB = errors.New("test: unexpected database call")

// noDB is a DB that fails the test on any call: the branches tested with
// it must be decided in memory.
type noDB struct{ t testing.TB }

func (d noDB) fail(sql string) {
	d.t.Helper()
	d.t.Errorf("unexpected database call: %.60s", sql)
}

func (d noDB) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	d.fail(sql)
	return pgconn.CommandTag{}, errNoDB
}

func (d noDB) Query(_ context.Context, sql string, _ ...any) (pgx.Rows, error) {
	d.fail(sql)
	return nil, errNoDB
}

func (d noDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	d.fail(sql)
	return errRow{errNoDB}
}

func (d noDB) Begin(context.Context) (pgx.Tx, error) {
	d.fail("BEGIN")
	return nil, errNoDB
}

// errDB fails every call with err, as a broken connection does.
type errDB struct{ err error }

func (d errDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, d.err
}
func (d errDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, d.err }
func (d errDB) QueryRow(context.Context, string, ...any) pgx.Row        { return errRow(d) }
func (d errDB) Begin(context.Context) (pgx.Tx, error)                   { return nil, d.err }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

var testTable = migrations.Table{Schema: "public", Name: "outbox"}

// event returns a complete event of aggregate typ/agg at position lsn/ord.
func event(id, typ, agg string, lsn pglogrepl.LSN, ord int) *replication.WALEvent {
	return &replication.WALEvent{
		Row:     record.Row{EventID: id, AggregateType: typ, AggregateID: agg, AggregateVersion: "7", EventType: "created", SchemaVersion: "2", Payload: []byte(`{"id":"` + id + `"}`), Headers: []byte(`{"trace":"t-` + id + `"}`), CommitTime: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)},
		TxLSN:   lsn,
		Ordinal: ord,
	}
}

// dbEnv is one test's isolated schema with the project's migrations applied.
type dbEnv struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	tbl   migrations.Table
	store *Store
}

// newDBEnv skips t unless the local stack is configured, and otherwise
// creates a schema of its own (dropped at the end) holding an outbox table
// migrated to the latest version. The test runs in parallel with others.
func newDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	e := newEmptyDBEnv(t)
	if _, err := migrations.Apply(e.ctx, e.pool, e.tbl, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// newEmptyDBEnv is newDBEnv without the migrations: the schema does not
// exist yet.
func newEmptyDBEnv(t *testing.T) *dbEnv {
	t.Helper()
	s := testenv.Reserve(t)
	tbl := migrations.Table{Schema: s.Schema, Name: "outbox"}
	return &dbEnv{ctx: s.Ctx, pool: s.Pool, tbl: tbl, store: NewStore(s.Pool, tbl)}
}

// exec runs sql, failing the test on error.
func (e *dbEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.pool.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// dlTable is the quoted dead-letter table.
func (e *dbEnv) dlTable() string { return migrations.DeadLetterTable(e.tbl).Quoted() }

// setSystem rewrites the system identifier of a row (nil: NULL, as rows
// written before migration 5 have).
func (e *dbEnv) setSystem(t *testing.T, eventID string, system any) {
	t.Helper()
	e.exec(t, `UPDATE `+e.dlTable()+` SET system_identifier = $2 WHERE event_id = $1`, eventID, system)
}

// status returns the status of a row of the env's outbox table ("" when
// there is none).
func (e *dbEnv) status(t *testing.T, eventID string) string {
	t.Helper()
	var s string
	err := e.pool.QueryRow(e.ctx, `SELECT status FROM `+e.dlTable()+` WHERE outbox_table = $1 AND event_id = $2`,
		e.tbl.String(), eventID).Scan(&s)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// awaitLockWaiter returns once a session waits for agg's advisory lock
// (lockKey: the lock resolve and Hold take), or once returned reports
// that the call meant to wait for it returned. It fails t after 30s.
func (e *dbEnv) awaitLockWaiter(t *testing.T, agg Aggregate, returned func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !returned() {
		var waiting int
		err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM pg_locks l, (SELECT `+lockKey+` AS k) key
			WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1
				AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND l.classid::bigint = (key.k >> 32) & 4294967295 AND l.objid::bigint = key.k & 4294967295`,
			e.store.outbox, agg.Type, agg.ID).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session waited for the lock of aggregate %s within 30s", agg)
		}
		// wall-clock: polls the real server's pg_locks, which signals nothing.
		time.Sleep(5 * time.Millisecond)
	}
}

// quarantine returns a quarantine over the env's store.
func (e *dbEnv) quarantine(t *testing.T, p poison.Policy) *Queue {
	t.Helper()
	q, err := NewQueue(e.ctx, e.store, p, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// mustPoison dead-letters ev through q, failing the test on error.
func mustPoison(t *testing.T, q *Queue, ev *replication.WALEvent) {
	t.Helper()
	if err := q.Poison(context.Background(), ev, "orders", "permanent", "message too large"); err != nil {
		t.Fatal(err)
	}
}

// hold calls q.Hold, failing the test on error.
func hold(t *testing.T, q *Queue, ev *replication.WALEvent) bool {
	t.Helper()
	held, err := q.Hold(context.Background(), ev, "orders")
	if err != nil {
		t.Fatal(err)
	}
	return held
}

// ids returns the event ids of entries.
func ids(entries []Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.EventID
	}
	return out
}

// recWriter records what it publishes and fails the events in fail.
type recWriter struct {
	got  []*replication.WALEvent
	fail map[string]error
}

func (w *recWriter) Write(_ context.Context, ev *replication.WALEvent) error {
	if err := w.fail[ev.EventID]; err != nil {
		return err
	}
	w.got = append(w.got, ev)
	return nil
}

func (w *recWriter) ids() []string {
	out := make([]string, len(w.got))
	for i, ev := range w.got {
		out[i] = ev.EventID
	}
	return out
}

// deliveredAt is a Progress that reports a fixed position.
type deliveredAt pglogrepl.LSN

func (d deliveredAt) Delivered(context.Context, pglogrepl.LSN) (Delivered, error) {
	return Delivered{LSN: pglogrepl.LSN(d), From: "test"}, nil
}

// caughtUp is the guard of a relay whose position is past every test
// event: the retries and discards of the tests that are not about the
// guard go ahead at once.
var caughtUp = Guard{Progress: deliveredAt(0xFFFF_0000_0000)}
