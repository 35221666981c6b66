package slot

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
)

// CheckServer verifies the server settings logical replication needs and
// warns about those that put the relay at risk.
func CheckServer(ctx context.Context, db DB, log zerolog.Logger) error {
	var walLevel, keep string
	var version int
	err := db.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('max_slot_wal_keep_size'),
		current_setting('server_version_num')::int`).Scan(&walLevel, &keep, &version)
	if err != nil {
		return fmt.Errorf("read server settings: %w", err)
	}
	if version < 140000 {
		return fmt.Errorf("PostgreSQL %d.%d is too old: the relay needs 14 or later (15 recommended)", version/10000, version%10000/100)
	}
	if walLevel != "logical" {
		return fmt.Errorf("wal_level is %q, logical replication needs wal_level = logical: "+
			"set it in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel)
	}
	if keep == "-1" {
		log.Warn().Str("stage", "startup").
			Msg("max_slot_wal_keep_size is unlimited: while the relay is down or Kafka is unreachable the slot retains WAL without bound and can fill the disk")
	}
	return nil
}

// EnsurePublication creates the publication for table (a quoted,
// schema-qualified name) with publish = 'insert', so cleanup deletes are
// never streamed. An existing publication is checked, not changed.
func (m *Manager) EnsurePublication(ctx context.Context, quotedTable, schema, name string) error {
	var pubInsert bool
	err := m.db.QueryRow(ctx, `SELECT pubinsert FROM pg_publication WHERE pubname = $1`, m.publication).Scan(&pubInsert)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read publication %q: %w", m.publication, err)
		}
		sql := fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')`, quoteIdent(m.publication), quotedTable)
		if _, err := m.db.Exec(ctx, sql); err != nil {
			return fmt.Errorf("create publication %q: %w", m.publication, err)
		}
		return nil
	}
	if !pubInsert {
		return fmt.Errorf("publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')", m.publication, quoteIdent(m.publication))
	}
	var has bool
	err = m.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
		m.publication, schema, name).Scan(&has)
	if err != nil {
		return fmt.Errorf("read publication %q tables: %w", m.publication, err)
	}
	if !has {
		return fmt.Errorf("publication %q does not include table %s: ALTER PUBLICATION %s ADD TABLE %s",
			m.publication, quotedTable, quoteIdent(m.publication), quotedTable)
	}
	return nil
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
