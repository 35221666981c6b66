package relay

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-relay/outbox-relay/poison"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
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
func (r *Relay) outboxOID(ctx context.Context) (uint32, error) {
	var oid uint32
	t := r.c.table
	err := r.pool.QueryRow(ctx, relationByNameSQL, t.Schema, t.Name).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		gone := fmt.Errorf("outbox table %s no longer exists (renamed, moved or dropped while the relay ran)", t)
		return 0, poison.Permanent(outboxdb.ExplainMissingTable(ctx, r.pool, r.cfg.Database.Publication, t, gone))
	}
	if err != nil {
		return 0, fmt.Errorf("resolve the OID of outbox table %s: %w", t, err)
	}
	return oid, nil
}

// currentName is the stream's replication.NameLookup: the name relation
// oid has now.
func (r *Relay) currentName(ctx context.Context, oid uint32) (string, string, bool, error) {
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
