// Package outboxdb is the database side of starting to relay: the pool,
// the checks every streaming command runs before it touches the slot
// (server settings, the outbox table's schema, its publication, the
// checkpoint and dead-letter tables), and the server's identity. run
// (package relay) and recover share it, so both refuse the same broken
// set-ups with the same messages.
package outboxdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// ApplicationName is the application_name of the pool's sessions.
const ApplicationName = "outbox-relay"

// ConnString reports whether s has the form of a PostgreSQL connection
// string: a postgres:// (or postgresql://) URL, or libpq's keyword/value
// form ("host=db dbname=app"), which pgx accepts as well. Check it before
// ParseConfig where s may be anything: pgconn's error quotes the string,
// with a password it recognises redacted, which a string of another form
// (a password given as the URL) is not.
func ConnString(s string) bool {
	if strings.Contains(s, "://") {
		// Only the scheme: pgconn parses the rest (net/url refuses
		// multi-host URLs with IPv6 hosts, [::1]:5432,[::2]:5432).
		return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
	}
	return strings.Contains(s, "=")
}

// ParseConfig parses url into the pool configuration Connect uses: a few
// connections (the relay's queries are small and rare; the data flows
// through the replication connection), named ApplicationName.
func ParseConfig(url string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgconn quotes the (password-redacted) string: a line break in
		// it would split the one-line error a command prints.
		return nil, lineError{err}
	}
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["application_name"] = ApplicationName
	return pc, nil
}

// SetBeforeConnect makes every connection of pc's pool call f first
// (relay.DatabaseConfig.BeforeConnect): pgxpool passes each connect its own
// copy of the configuration, so f may set the password of the moment.
// A nil f leaves pc as it is.
func SetBeforeConnect(pc *pgxpool.Config, f func(context.Context, *pgconn.Config) error) {
	if f == nil {
		return
	}
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if err := f(ctx, &cc.Config); err != nil {
			return fmt.Errorf("before connect: %w", err)
		}
		return nil
	}
}

// Connect opens a pool of pc and checks that the server answers.
func Connect(ctx context.Context, pc *pgxpool.Config) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return pool, nil
}

// Outbox names what is streamed: the outbox table, its slot and its
// publication.
type Outbox struct {
	Table       migrations.Table
	Slot        string
	Publication string
	// FailoverSlot: a slot created for streaming is a failover slot on
	// PostgreSQL 17+ (slot.Config.NoFailover).
	FailoverSlot bool
	// SlotDB is the hot standby the slot lives on when the relay decodes
	// there (relay.DatabaseConfig.ReplicationURL); nil: Check's pool.
	SlotDB slot.DB
}

// slots is the manager of the outbox's slot: on the primary pool, or on
// SlotDB, a standby, with pool as its primary.
func (o Outbox) slots(pool *pgxpool.Pool) *slot.Manager {
	cfg := slot.Config{Name: o.Slot, Publication: o.Publication, NoFailover: !o.FailoverSlot}
	db := slot.DB(pool)
	if o.SlotDB != nil {
		db, cfg.Primary = o.SlotDB, pool
	}
	return slot.NewManager(db, cfg)
}

// Checked is an Outbox that passed Check, with the handles streaming uses.
type Checked struct {
	Schema      migrations.Schema
	Slots       *slot.Manager
	Checkpoints *checkpoint.Store
	DeadLetters *deadletter.Store
}

// Check runs the start-up checks on pool: the server's settings, the
// outbox table's schema (a missing table names what the publication holds
// instead), the publication (created if missing), and the checkpoint and
// dead-letter tables. Each error says how to fix it.
func (o Outbox) Check(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger) (*Checked, error) {
	if err := slot.CheckServer(ctx, pool, log); err != nil {
		return nil, err
	}
	schema, err := migrations.Validate(ctx, pool, o.Table)
	if err != nil {
		var se *migrations.SchemaError
		if errors.As(err, &se) && se.TableMissing {
			err = ExplainMissingTable(ctx, pool, o.Publication, o.Table, err)
		}
		return nil, err
	}
	c := &Checked{
		Schema:      schema,
		Slots:       o.slots(pool),
		Checkpoints: checkpoint.NewStore(pool, o.Table, o.Slot),
		DeadLetters: deadletter.NewStore(pool, o.Table),
	}
	if err := c.Slots.EnsurePublication(ctx, o.Table.Quoted(), o.Table.Schema, o.Table.Name); err != nil {
		return nil, err
	}
	if err := c.Checkpoints.Check(ctx); err != nil {
		return nil, err
	}
	if err := c.DeadLetters.Check(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// ExplainMissingTable adds to err, a missing outbox table, the tables the
// publication still includes: a renamed or moved outbox stays in it under
// its new name, which is then the likely fix. Best effort: a failed lookup
// leaves err as it is.
func ExplainMissingTable(ctx context.Context, db migrations.Querier, publication string, t migrations.Table, err error) error {
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
		"rename it back, or run with Database.Table set to its new name", err, publication, strings.Join(names, ", "))
}

// Identify runs IDENTIFY_SYSTEM on a short-lived replication connection:
// the cluster and timeline a checkpoint must belong to.
func Identify(ctx context.Context, dsn string, opts ...replication.Option) (checkpoint.Identity, error) {
	conn, err := replication.Connect(ctx, dsn, opts...)
	if err != nil {
		return checkpoint.Identity{}, err
	}
	defer conn.Close(context.Background())
	id, _, err := checkpoint.Identify(ctx, conn)
	return id, err
}

// ServerSource reads, on the database db connects to, what relay.Source
// names besides the slot: the cluster's system identifier
// (pg_control_system, the same as IDENTIFY_SYSTEM's, which a running
// relay uses) and the database's name. doctor and the integration tests
// need it without a replication connection, to name the default
// transactional id and position key as a running relay does; relay.Source
// stays a plain value, so the query lives here rather than in the API.
func ServerSource(ctx context.Context, db *pgxpool.Pool) (systemID, database string, err error) {
	if err := db.QueryRow(ctx, `SELECT (SELECT system_identifier::text FROM pg_control_system()), current_database()`).
		Scan(&systemID, &database); err != nil {
		return "", "", fmt.Errorf("read the system identifier and database: %w", err)
	}
	return systemID, database, nil
}

// ValidName reports whether s can name a slot, publication or role: 1-63
// lower-case letters, digits and underscores (no quoting needed).
func ValidName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// lineError is an error whose text has its line breaks escaped.
type lineError struct{ err error }

func (e lineError) Error() string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(e.err.Error())
}
func (e lineError) Unwrap() error { return e.err }
