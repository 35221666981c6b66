package slot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
)

// CheckServer verifies the server settings logical replication needs and
// warns about those that put the relay at risk. A wrong wal_level's error
// names the fix of the managed service the server runs on, if recognised
// (internal/pgprovider).
func CheckServer(ctx context.Context, db DB, log *slog.Logger) error {
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
		fix := "set it in postgresql.conf (ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL"
		// Managed services refuse ALTER SYSTEM: name their switch instead.
		// Only on this error path, so a healthy start-up pays nothing.
		if p, err := pgprovider.Detect(ctx, db); err == nil && p.Managed() {
			fix = "on " + p.Name() + ": " + p.WALLevelFix()
		}
		return fmt.Errorf("wal_level is %q, logical replication needs wal_level = logical: %s", walLevel, fix)
	}
	if keep == "-1" {
		log.Warn("max_slot_wal_keep_size is unlimited: while the relay is down or Kafka is unreachable the slot retains WAL without bound and can fill the disk", slog.String("stage", "startup"))
	}
	return nil
}

// primary is where the publication is read and written: the slot's server,
// or for a slot on a standby its primary (a standby is read-only, and gets
// the publication by replication).
func (m *Manager) primary() DB {
	if m.cfg.Primary != nil {
		return m.cfg.Primary
	}
	return m.db
}

// EnsurePublication creates the publication for table (a quoted,
// schema-qualified name) with publish = 'insert', so cleanup deletes are
// never streamed, and for a partitioned table with
// publish_via_partition_root = true (see PartitionRootError). An existing
// publication is checked, not changed (EnsurePartitionRoot changes it).
func (m *Manager) EnsurePublication(ctx context.Context, quotedTable, schema, name string) error {
	partitioned, err := m.partitioned(ctx, quotedTable)
	if err != nil {
		return err
	}
	var pubInsert, viaRoot bool
	err = m.primary().QueryRow(ctx, `SELECT pubinsert, pubviaroot FROM pg_publication WHERE pubname = $1`, m.publication).Scan(&pubInsert, &viaRoot)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read publication %q: %w", m.publication, err)
		}
		with := "publish = 'insert'"
		if partitioned {
			with += ", publish_via_partition_root = true"
		}
		sql := fmt.Sprintf(`CREATE PUBLICATION %s FOR TABLE %s WITH (%s)`, quoteIdent(m.publication), quotedTable, with)
		if _, err := m.primary().Exec(ctx, sql); err != nil {
			return fmt.Errorf("create publication %q: %w", m.publication, err)
		}
		return nil
	}
	if !pubInsert {
		return fmt.Errorf("publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')", m.publication, quoteIdent(m.publication))
	}
	if partitioned && !viaRoot {
		return &PartitionRootError{Publication: m.publication, Table: quotedTable}
	}
	var has bool
	err = m.primary().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`,
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

// partitioned reports whether quotedTable is a partitioned table.
func (m *Manager) partitioned(ctx context.Context, quotedTable string) (bool, error) {
	var p bool
	err := m.primary().QueryRow(ctx, `SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false)`, quotedTable).Scan(&p)
	if err != nil {
		return false, fmt.Errorf("read the kind of table %s: %w", quotedTable, err)
	}
	return p, nil
}

// PartitionRootError is a publication of a partitioned outbox without
// publish_via_partition_root. pgoutput then reports every insert under its
// leaf partition's name, which the relay does not recognise as the outbox:
// such events would never be relayed. So the relay refuses to stream.
type PartitionRootError struct {
	Publication, Table string
}

func (e *PartitionRootError) Error() string {
	return fmt.Sprintf("publication %q of the partitioned table %s lacks publish_via_partition_root: its inserts would arrive under the "+
		"partitions' names and not be relayed; run \"outbox-relay migrate\" (sets it) or ALTER PUBLICATION %s SET (publish_via_partition_root = true), "+
		"then check for events committed meanwhile (outbox-relay reconcile, outbox-relay replay --since)", e.Publication, e.Table, quoteIdent(e.Publication))
}

// EnsurePartitionRoot sets publish_via_partition_root on an existing
// publication of a partitioned table (what migrate does; a no-op for a
// plain table or a missing publication, which EnsurePublication creates
// right).
func (m *Manager) EnsurePartitionRoot(ctx context.Context, quotedTable string) error {
	partitioned, err := m.partitioned(ctx, quotedTable)
	if err != nil || !partitioned {
		return err
	}
	var viaRoot bool
	err = m.primary().QueryRow(ctx, `SELECT pubviaroot FROM pg_publication WHERE pubname = $1`, m.publication).Scan(&viaRoot)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && viaRoot {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read publication %q: %w", m.publication, err)
	}
	if _, err := m.primary().Exec(ctx, `ALTER PUBLICATION `+quoteIdent(m.publication)+` SET (publish_via_partition_root = true)`); err != nil {
		return fmt.Errorf("set publish_via_partition_root on publication %q: %w", m.publication, err)
	}
	return nil
}
