//go:build integration

package outbox

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/outbox-relay/outbox-relay/migrations"
)

func testURL(t *testing.T) string {
	t.Helper()
	url := os.Getenv("OUTBOX_RELAY_DATABASE_URL")
	if url == "" {
		t.Skip("OUTBOX_RELAY_DATABASE_URL is not set")
	}
	return url
}

// setup creates an outbox table in a throw-away schema.
func setup(t *testing.T, opts migrations.ApplyOptions) (context.Context, *pgxpool.Pool, migrations.Table) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	tbl := migrations.Table{Schema: "outbox_test_" + hex.EncodeToString(b), Name: "outbox"}
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{tbl.Schema}.Sanitize()+" CASCADE")
		if err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	if _, err := migrations.Apply(ctx, pool, tbl, opts); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, tbl
}

type row struct {
	aggType, aggID, eventType string
	aggVersion                int64
	schemaVersion             int
	payload                   []byte
	headers                   map[string]string
	createdAt                 time.Time
}

func readRow(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tbl migrations.Table, id uuid.UUID) row {
	t.Helper()
	var (
		r       row
		payload string
		headers *string
	)
	err := pool.QueryRow(ctx, `SELECT aggregate_type, aggregate_id, aggregate_version, event_type,
		schema_version, payload::text, headers::text, created_at
		FROM `+tbl.Quoted()+` WHERE event_id = $1`, id).
		Scan(&r.aggType, &r.aggID, &r.aggVersion, &r.eventType, &r.schemaVersion, &payload, &headers, &r.createdAt)
	if err != nil {
		t.Fatalf("read event %s: %v", id, err)
	}
	r.payload = []byte(payload)
	if headers != nil {
		if err := json.Unmarshal([]byte(*headers), &r.headers); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func checkRow(t *testing.T, got row, e *Event, wantPayload string) {
	t.Helper()
	if got.aggType != e.AggregateType || got.aggID != e.AggregateID || got.aggVersion != e.AggregateVersion ||
		got.eventType != e.EventType || got.schemaVersion != e.SchemaVersion {
		t.Fatalf("row = %+v, event = %+v", got, e)
	}
	if string(got.payload) != wantPayload {
		t.Fatalf("payload = %q, want %q", got.payload, wantPayload)
	}
	if len(got.headers) != len(e.Headers) || got.headers["trace_id"] != e.Headers["trace_id"] {
		t.Fatalf("headers = %v, want %v", got.headers, e.Headers)
	}
	if time.Since(got.createdAt) > time.Minute {
		t.Fatalf("created_at = %v", got.createdAt)
	}
}

func TestIntegrationAppendPgx(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	w := NewWriter(tbl)

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	e := validEvent()
	e.Payload = []byte(`{"id": "o-1", "n": 1}`)
	if err := w.Append(ctx, PgxTx(tx), e); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// jsonb normalises the text form.
	checkRow(t, readRow(t, ctx, pool, tbl, e.EventID), e, `{"n": 1, "id": "o-1"}`)
}

func TestIntegrationAppendPgxSimpleProtocol(t *testing.T) {
	ctx, _, tbl := setup(t, migrations.ApplyOptions{})
	cfg, err := pgx.ParseConfig(testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := NewWriter(tbl).Append(ctx, PgxTx(tx), validEvent()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestIntegrationAppendDatabaseSQL(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	db, err := sql.Open("pgx", testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := NewWriter(tbl)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	events := []*Event{validEvent(), validEvent()}
	events[1].AggregateVersion = 3
	if err := w.AppendBatch(ctx, SQLTx(tx), events); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		checkRow(t, readRow(t, ctx, pool, tbl, e.EventID), e, `{"id": "o-1"}`)
	}
}

func TestIntegrationAppendBinary(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{PayloadType: "bytea"})
	s, err := migrations.Validate(ctx, pool, tbl)
	if err != nil {
		t.Fatal(err)
	}
	w := NewWriter(tbl, WithSchema(s))
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	e := validEvent()
	e.Payload = []byte{0, 1, 2, 0xff}
	if err := w.Append(ctx, PgxTx(tx), e); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var payload []byte
	if err := pool.QueryRow(ctx, "SELECT payload FROM "+tbl.Quoted()+" WHERE event_id = $1", e.EventID).Scan(&payload); err != nil {
		t.Fatal(err)
	}
	if string(payload) != "\x00\x01\x02\xff" {
		t.Fatalf("payload = %x", payload)
	}
}

func TestIntegrationRollbackDiscardsEvent(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e := validEvent()
	if err := NewWriter(tbl).Append(ctx, PgxTx(tx), e); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tbl.Quoted()).Scan(&n); err != nil || n != 0 {
		t.Fatalf("count = %d, %v; want 0 after rollback", n, err)
	}
}

func TestIntegrationDuplicateEventID(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	w := NewWriter(tbl)
	e := validEvent()
	for i := range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		err = w.Append(ctx, PgxTx(tx), e)
		if i == 0 {
			if err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			continue
		}
		_ = tx.Rollback(ctx)
		if err == nil || errors.Is(err, ErrInvalidEvent) {
			t.Fatalf("second insert of %s: err = %v, want a database error", e.EventID, err)
		}
	}
}
