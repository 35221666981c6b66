package migrations

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

//go:embed *.sql
var sqlFiles embed.FS

// VersionTableName is the bookkeeping table Apply creates in the outbox
// table's schema. One row per (outbox table, applied version), so several
// outbox tables can share a schema.
const VersionTableName = "outbox_relay_schema_migrations"

// advisoryLockKey serialises every outbox-relay migration in a database.
// One database-wide key (ASCII "outbox") is enough: migrations are rare
// and short, and a single key also covers creating the shared schema and
// bookkeeping table, which per-table keys would race on.
const advisoryLockKey int64 = 0x6f7574626f78

// Payload column types Apply can create.
const (
	PayloadJSONB = "jsonb"
	PayloadBytea = "bytea"
)

// ApplyOptions tunes the DDL Apply generates. The zero value creates the
// default table.
type ApplyOptions struct {
	// PayloadType is the type of the payload column migration 1 creates:
	// "jsonb" (default, lets you query payloads and makes PostgreSQL
	// reject invalid JSON) or "bytea" (opaque bytes, e.g. Protobuf or
	// Avro). It only matters when Apply creates the table; an existing
	// table keeps its payload type as long as Validate accepts it.
	PayloadType string
	// NullablePayload creates the payload column without NOT NULL, so
	// that a row with a NULL payload can ask for a tombstone (the
	// relay's --tombstone-on-null-payload; docs/formats.md). Like
	// PayloadType it only matters when Apply creates the table: for an
	// existing one, ALTER TABLE ... ALTER COLUMN payload DROP NOT NULL.
	NullablePayload bool
}

func (o ApplyOptions) payloadType() (string, error) {
	switch o.PayloadType {
	case "", PayloadJSONB:
		return PayloadJSONB, nil
	case PayloadBytea:
		return PayloadBytea, nil
	default:
		return "", fmt.Errorf("invalid payload type %q: want %q or %q", o.PayloadType, PayloadJSONB, PayloadBytea)
	}
}

// migration is one embedded SQL file.
type migration struct {
	version int
	name    string
	tmpl    *template.Template
}

// templateData is what the SQL templates may refer to.
type templateData struct {
	// Table is the quoted, schema-qualified outbox table.
	Table string
	// PayloadType is "jsonb" or "bytea"; validated before rendering.
	PayloadType string
	// NullablePayload leaves NOT NULL off the payload column.
	NullablePayload bool
	// DeadLetter is the quoted dead-letter table beside the outbox table.
	DeadLetter string
	// OutboxTable is the outbox table's unquoted name, as recorded in
	// dead-letter rows.
	OutboxTable string
	// Checkpoint is the quoted checkpoint table beside the outbox table.
	Checkpoint string
	// CheckpointLit, DeadLetterLit and SchemaLit are Checkpoint, DeadLetter
	// and the quoted schema as SQL string literals, for the catalog checks
	// (::regclass, to_regclass) that skip DDL on the shared tables when it
	// would change nothing but still take their locks.
	CheckpointLit, DeadLetterLit, SchemaLit string
}

// sqlLiteral quotes s as a standard-conforming SQL string literal.
func sqlLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

var migrationFileName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// loadMigrations parses the embedded files, sorted by version, and checks
// that versions run 1, 2, 3... without gaps or duplicates (a gap would
// mean a lost file; a duplicate, a merge accident).
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(sqlFiles, ".")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		m := migrationFileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("embedded migration %q: name must be NNNN_description.sql", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		src, err := fs.ReadFile(sqlFiles, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read embedded migration %q: %w", e.Name(), err)
		}
		tmpl, err := template.New(e.Name()).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("parse embedded migration %q: %w", e.Name(), err)
		}
		out = append(out, migration{version: v, name: e.Name(), tmpl: tmpl})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("embedded migration %q: version %d, want %d (versions must be contiguous from 1)", m.name, m.version, i+1)
		}
	}
	return out, nil
}

func (m migration) render(d templateData) (string, error) {
	var b bytes.Buffer
	if err := m.tmpl.Execute(&b, d); err != nil {
		return "", fmt.Errorf("render migration %s: %w", m.name, err)
	}
	return b.String(), nil
}

// Versions returns the versions of all migrations compiled into the
// binary, in order, so callers can report how far a table is behind.
func Versions() ([]int, error) {
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	vs := make([]int, len(migs))
	for i, m := range migs {
		vs[i] = m.version
	}
	return vs, nil
}

// Apply brings table t up to the latest schema and returns the versions it
// applied (empty when the table was already current).
//
// Each pending migration runs in its own transaction holding
// pg_advisory_xact_lock, and is skipped if another process recorded it in
// the meantime, so concurrent Apply calls are safe. The schema of t and the
// bookkeeping table are created first if missing. After the last pending
// migration (or, when nothing is pending, on its own) the table is checked
// with Validate; a hand-made table that fails validation makes Apply fail
// without recording anything, and the error is a *SchemaError.
//
// If the bookkeeping says t was migrated but t no longer exists (someone
// dropped it), the stale records are removed and t is created again.
func Apply(ctx context.Context, db Execer, t Table, opts ApplyOptions) (applied []int, err error) {
	payloadType, err := opts.payloadType()
	if err != nil {
		return nil, err
	}
	migs, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	data := templateData{Table: t.Quoted(), PayloadType: payloadType, NullablePayload: opts.NullablePayload, DeadLetter: DeadLetterTable(t).Quoted(), OutboxTable: t.String(),
		Checkpoint: CheckpointTable(t).Quoted()}
	data.CheckpointLit, data.DeadLetterLit = sqlLiteral(data.Checkpoint), sqlLiteral(data.DeadLetter)
	data.SchemaLit = sqlLiteral(pgx.Identifier{t.Schema}.Sanitize())
	versions := t.sibling(VersionTableName)

	if err := inLockedTx(ctx, db, func(tx pgx.Tx) error {
		return prepareBookkeeping(ctx, tx, t, versions)
	}); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", t, err)
	}

	applied = []int{}
	validated := false
	for _, m := range migs {
		ran := false
		err := inLockedTx(ctx, db, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx,
				"SELECT EXISTS (SELECT 1 FROM "+versions.Quoted()+" WHERE table_name = $1 AND version = $2)",
				t.Name, m.version).Scan(&done); err != nil {
				return fmt.Errorf("read applied migrations: %w", err)
			}
			if done {
				return nil
			}
			sql, err := m.render(data)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("apply migration %s: %w", m.name, err)
			}
			if _, err := tx.Exec(ctx,
				"INSERT INTO "+versions.Quoted()+" (table_name, version) VALUES ($1, $2)",
				t.Name, m.version); err != nil {
				return fmt.Errorf("record migration %s: %w", m.name, err)
			}
			// Validate inside every migration's transaction, so a table
			// that does not fit fails the first one and leaves no record
			// (nor any of the later tables) behind.
			if _, err := Validate(ctx, tx, t); err != nil {
				return err
			}
			ran = true
			return nil
		})
		if err != nil {
			return applied, migrateError(t, err)
		}
		if ran {
			applied = append(applied, m.version)
			validated = true
		}
	}
	if !validated {
		if _, err := Validate(ctx, db, t); err != nil {
			return applied, migrateError(t, err)
		}
	}
	return applied, nil
}

// migrateError adds context to err unless it is a *SchemaError, which
// already names the table and whose wording is part of the contract.
func migrateError(t Table, err error) error {
	var se *SchemaError
	if errors.As(err, &se) {
		return err
	}
	return fmt.Errorf("migrate %s: %w", t, err)
}

// prepareBookkeeping creates t's schema and the version table if needed and
// drops version records of a table that no longer exists.
func prepareBookkeeping(ctx context.Context, tx pgx.Tx, t, versions Table) error {
	// Check before CREATE SCHEMA IF NOT EXISTS: that statement demands the
	// CREATE privilege on the database even when the schema exists, which
	// a least-privilege migration role usually lacks.
	var schemaExists bool
	if err := tx.QueryRow(ctx,
		"SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = $1)",
		t.Schema).Scan(&schemaExists); err != nil {
		return fmt.Errorf("look up schema %q: %w", t.Schema, err)
	}
	if !schemaExists {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{t.Schema}.Sanitize()); err != nil {
			return fmt.Errorf("create schema %q: %w", t.Schema, err)
		}
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+versions.Quoted()+` (
	table_name text NOT NULL,
	version    int NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (table_name, version)
)`); err != nil {
		return fmt.Errorf("create %s: %w", versions, err)
	}
	var tableExists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (
	SELECT 1 FROM pg_catalog.pg_class c
	JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
	WHERE n.nspname = $1 AND c.relname = $2)`, t.Schema, t.Name).Scan(&tableExists); err != nil {
		return fmt.Errorf("look up table %s: %w", t, err)
	}
	if !tableExists {
		if _, err := tx.Exec(ctx, "DELETE FROM "+versions.Quoted()+" WHERE table_name = $1", t.Name); err != nil {
			return fmt.Errorf("clear stale records in %s: %w", versions, err)
		}
	}
	return nil
}

// inLockedTx runs fn in a transaction that first takes the migration
// advisory lock. The lock is transaction-scoped, so it is released by
// commit or rollback and cannot leak if the connection goes back to a pool.
func inLockedTx(ctx context.Context, db Execer, fn func(pgx.Tx) error) (err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			// The original error matters more than a failed rollback of a
			// transaction that is already aborted.
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", advisoryLockKey); err != nil {
		return fmt.Errorf("take migration lock: %w", err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
