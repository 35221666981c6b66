package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Publications follow a table's OID, not its name: after ALTER TABLE …
// RENAME or SET SCHEMA the outbox's inserts keep streaming under its OID
// and a new name. The stream learns the OID at each start so that it
// recognises the table under any name (and stops), instead of ignoring
// rows whose relation name no longer matches --table.

// relationByNameSQL finds a relation by catalog name, like start-up
// validation, so that no quoting or search_path is involved.
const relationByNameSQL = `
SELECT c.oid FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`

// outboxOID resolves the configured outbox table's OID. A table that is
// gone is permanent: the relay stops, slot position held, saying what the
// publication holds instead.
func (r *relay) outboxOID(ctx context.Context) (uint32, error) {
	var oid uint32
	err := r.pool.QueryRow(ctx, relationByNameSQL, r.cfg.table.Schema, r.cfg.table.Name).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		gone := fmt.Errorf("outbox table %s no longer exists (renamed, moved or dropped while the relay ran)", r.cfg.table)
		return 0, permanentError{explainMissingTable(ctx, r.pool, r.cfg.Publication, r.cfg.table, gone)}
	}
	if err != nil {
		return 0, fmt.Errorf("resolve the OID of outbox table %s: %w", r.cfg.table, err)
	}
	return oid, nil
}

// currentName is the stream's replication.NameLookup: the name relation
// oid has now.
func (r *relay) currentName(ctx context.Context, oid uint32) (string, string, bool, error) {
	var ns, name string
	err := r.pool.QueryRow(ctx, `SELECT n.nspname, c.relname FROM pg_catalog.pg_class c
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, oid).Scan(&ns, &name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, err
	}
	return ns, name, true, nil
}

// explainMissingTable adds to err, a missing outbox table, the tables the
// publication still includes: a renamed or moved outbox stays in it under
// its new name, which is then the likely fix. Best effort: a failed lookup
// leaves err as it is.
func explainMissingTable(ctx context.Context, db migrations.Querier, publication string, t migrations.Table, err error) error {
	rows, qerr := db.Query(ctx, `SELECT schemaname || '.' || tablename FROM pg_catalog.pg_publication_tables
		WHERE pubname = $1 AND NOT (schemaname = $2 AND tablename = $3) ORDER BY 1 LIMIT 5`, publication, t.Schema, t.Name)
	if qerr != nil {
		return err
	}
	names, qerr := pgx.CollectRows(rows, pgx.RowTo[string])
	if qerr != nil || len(names) == 0 {
		return err
	}
	return fmt.Errorf("%w; publication %q includes %s: if the outbox was renamed or moved (ALTER TABLE … RENAME / SET SCHEMA), "+
		"rename it back, or run with --table set to its new name", err, publication, strings.Join(names, ", "))
}

// explainStartupSchema is explainMissingTable for start-up validation's
// error: only a missing table gets the hint.
func explainStartupSchema(ctx context.Context, db migrations.Querier, publication string, t migrations.Table, err error) error {
	var se *migrations.SchemaError
	if !errors.As(err, &se) || !se.TableMissing {
		return err
	}
	return explainMissingTable(ctx, db, publication, t, err)
}
