package migrations

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Grant is one privilege the role that runs `outbox-relay run` needs.
type Grant struct {
	// Privileges and Object form GRANT <Privileges> ON <Object>, e.g.
	// SELECT and TABLE "public"."outbox".
	Privileges string
	Object     string
	// Kind ("DATABASE", "SCHEMA" or "TABLE") and Name say which
	// has_<kind>_privilege function checks it and with what name: the
	// database or schema name as is, a table's schema-qualified quoted
	// name. doctor uses them to check a role against this list.
	Kind string
	Name string
	// Why the relay needs it, for the migrate output and the README.
	Why string
}

// runtimeGrants lists, per object the relay uses while it runs, what it
// does there. It is the only place these privileges are decided: when a
// migration adds a table the relay reads or writes at run time, add its
// line here (and nothing broader). Slot and publication need no grant:
// the role's REPLICATION attribute covers streaming from the slot, and
// migrate (run by an admin) creates both.
var runtimeGrants = []struct {
	privileges string
	kind       string
	name       func(t Table, database string) string
	why        string
}{
	{"CONNECT", "DATABASE", func(_ Table, db string) string { return db },
		"connect (PUBLIC usually has it; granted in case it was revoked)"},
	{"USAGE", "SCHEMA", func(t Table, _ string) string { return t.Schema },
		"look up the outbox and dead-letter tables"},
	{"SELECT", "TABLE", func(t Table, _ string) string { return t.Quoted() },
		"validate the outbox table at start-up; its rows arrive through the slot, never by query"},
	{"SELECT, INSERT, UPDATE", "TABLE", func(t Table, _ string) string { return DeadLetterTable(t).Quoted() },
		"dead-letter poison events and park their aggregates (quarantine); the dlq commands resolve them"},
	{"SELECT, INSERT, UPDATE, DELETE", "TABLE", func(t Table, _ string) string { return CheckpointTable(t).Quoted() },
		"read and save the relay's checkpoint, prune old rows (its id is an identity column: no sequence grant)"},
}

// GrantOptions adds the privileges of optional features to RuntimeGrants.
type GrantOptions struct {
	// Cleanup adds DELETE on the outbox table, for the leader's cleanup
	// schedule (run --cleanup-older-than). Dropping old partitions of a
	// partitioned outbox needs its owner and is not granted.
	Cleanup bool
	// ReplicationRole, when set, is granted to the runtime role instead of
	// the REPLICATION attribute: on RDS and Aurora the right to stream from
	// a slot is membership in rds_replication, and customers cannot give
	// the attribute (pgprovider.Provider.ReplicationRole names it).
	ReplicationRole string
}

// cleanupGrant is what GrantOptions.Cleanup adds.
var cleanupGrant = struct {
	privileges string
	kind       string
	name       func(t Table, database string) string
	why        string
}{"DELETE", "TABLE", func(t Table, _ string) string { return t.Quoted() },
	"the relay's cleanup schedule (Cleanup.OlderThan) deletes rows Kafka has acknowledged (deletes are not published)"}

// RuntimeGrants returns the privileges of the relay's runtime role on
// outbox table t in database.
func RuntimeGrants(t Table, database string, opts GrantOptions) []Grant {
	list := runtimeGrants
	if opts.Cleanup {
		list = append(list[:len(list):len(list)], cleanupGrant)
	}
	out := make([]Grant, len(list))
	for i, g := range list {
		name := g.name(t, database)
		object := name
		if g.kind != "TABLE" {
			object = pgx.Identifier{name}.Sanitize()
		}
		out[i] = Grant{Privileges: g.privileges, Object: g.kind + " " + object, Kind: g.kind, Name: name, Why: g.why}
	}
	return out
}

// GrantRuntimeRole creates role (LOGIN REPLICATION, no password: set one
// with ALTER ROLE ... PASSWORD, or use certificate authentication) unless
// it exists, makes sure it has REPLICATION, and grants it RuntimeGrants -
// nothing else. With opts.ReplicationRole it grants that role instead of
// the REPLICATION attribute. It runs in one transaction under the
// migration lock and reports whether it created the role. Creating a
// REPLICATION role takes a superuser (PostgreSQL 15 and older) or a
// CREATEROLE role that has REPLICATION itself (16 and later).
func GrantRuntimeRole(ctx context.Context, db Execer, role string, t Table, opts GrantOptions) (created bool, grants []Grant, err error) {
	err = inLockedTx(ctx, db, func(tx pgx.Tx) error {
		var database string
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT current_database(), EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = $1)`, role).
			Scan(&database, &exists); err != nil {
			return fmt.Errorf("look up role %q: %w", role, err)
		}
		r := pgx.Identifier{role}.Sanitize()
		var stmts []string
		switch {
		case opts.ReplicationRole != "" && exists:
			stmts = []string{"GRANT " + pgx.Identifier{opts.ReplicationRole}.Sanitize() + " TO " + r}
		case opts.ReplicationRole != "":
			stmts = []string{"CREATE ROLE " + r + " LOGIN", "GRANT " + pgx.Identifier{opts.ReplicationRole}.Sanitize() + " TO " + r}
		case exists:
			stmts = []string{"ALTER ROLE " + r + " REPLICATION"}
		default:
			stmts = []string{"CREATE ROLE " + r + " LOGIN REPLICATION"}
		}
		for _, stmt := range stmts {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w (run migrate as an admin, or create the role yourself: %s)", stmt, err, strings.Join(stmts, "; "))
			}
		}
		grants = RuntimeGrants(t, database, opts)
		for _, g := range grants {
			sql := "GRANT " + g.Privileges + " ON " + g.Object + " TO " + r
			if _, err := tx.Exec(ctx, sql); err != nil {
				return fmt.Errorf("%s: %w", sql, err)
			}
		}
		created = !exists
		return nil
	})
	if err != nil {
		return false, nil, fmt.Errorf("grant role %q: %w", role, err)
	}
	return created, grants, nil
}

// UnusedRoleAttributes returns the attributes of role that the relay never
// uses (SUPERUSER, CREATEROLE, CREATEDB, BYPASSRLS): with them a leaked
// relay credential can do far more than relay events (make itself roles,
// read past row security). migrate --grant-role and doctor report them.
func UnusedRoleAttributes(ctx context.Context, db RowQuerier, role string) ([]string, error) {
	var super, createRole, createDB, bypassRLS bool
	if err := db.QueryRow(ctx, `SELECT rolsuper, rolcreaterole, rolcreatedb, rolbypassrls FROM pg_catalog.pg_roles WHERE rolname = $1`, role).
		Scan(&super, &createRole, &createDB, &bypassRLS); err != nil {
		return nil, fmt.Errorf("read role %s's attributes: %w", role, err)
	}
	var attrs []string
	for _, a := range []struct {
		has  bool
		name string
	}{{super, "SUPERUSER"}, {createRole, "CREATEROLE"}, {createDB, "CREATEDB"}, {bypassRLS, "BYPASSRLS"}} {
		if a.has {
			attrs = append(attrs, a.name)
		}
	}
	return attrs, nil
}
