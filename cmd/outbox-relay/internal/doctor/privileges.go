package doctor

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// privileges checks the connected role against what `outbox-relay run`
// needs: the right to stream from a slot and migrations.RuntimeGrants, the
// same list `migrate --grant-role` grants, so the two cannot drift apart.
// The right to stream is the REPLICATION attribute, or on RDS and Aurora
// membership in rds_replication (p.ReplicationRole), which leaves
// rolreplication false. A superuser, or a member of the provider's
// stand-in for one (p.AdminRole), passes every check but gets a warning:
// the relay holds production credentials and needs far less. So does a
// role with attributes it never uses (CREATEROLE, CREATEDB, BYPASSRLS),
// or with table privileges beyond RuntimeGrants (TRUNCATE on the outbox).
func privileges(ctx context.Context, db DB, t Target, p pgprovider.Provider, r *Report) {
	var role, database string
	var super, repl, replMember, admin bool
	err := db.QueryRow(ctx, `SELECT current_user, current_database(), rolsuper, rolreplication,
		coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_catalog.pg_roles WHERE rolname = $1), false),
		coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_catalog.pg_roles WHERE rolname = $2), false)
		FROM pg_catalog.pg_roles WHERE rolname = current_user`, p.ReplicationRole(), p.AdminRole()).
		Scan(&role, &database, &super, &repl, &replMember, &admin)
	if err != nil {
		r.add("role", Fail, "cannot read the role's attributes: "+err.Error(), "check the database URL")
		return
	}
	quotedRole := pgx.Identifier{role}.Sanitize()
	leastPrivilege := "run as a least-privilege role: outbox-relay migrate --grant-role outbox_relay (as an admin), then connect as outbox_relay"
	switch {
	case super:
		r.add("role", Warn, fmt.Sprintf("%s is a superuser: the relay needs far less", quotedRole), leastPrivilege)
	case !repl && !replMember:
		lacks := "the REPLICATION attribute"
		if p.ReplicationRole() != "" {
			lacks = "membership in " + p.ReplicationRole()
		}
		r.add("role", Fail, fmt.Sprintf("%s lacks %s: it cannot stream from the slot", quotedRole, lacks),
			p.ReplicationFix(quotedRole)+" (or outbox-relay migrate --grant-role "+role+" as an admin)")
	case admin:
		r.add("role", Warn, fmt.Sprintf("%s is a member of %s, %s's stand-in for a superuser: the relay needs far less", quotedRole, p.AdminRole(), p.Name()),
			leastPrivilege)
	case !repl:
		r.add("role", Pass, quotedRole+" is a member of "+p.ReplicationRole()+" (the replication right on "+p.Name()+"), not superuser", "")
	default:
		r.add("role", Pass, quotedRole+" has REPLICATION, not superuser", "")
	}
	takeover(ctx, db, quotedRole, super, r)
	if super {
		return // has_*_privilege is always true for a superuser
	}
	attrs, err := migrations.UnusedRoleAttributes(ctx, db, role)
	if err != nil {
		r.add("role attributes", Fail, err.Error(), "check the database URL")
		return
	}
	if len(attrs) > 0 {
		r.add("role attributes", Warn, fmt.Sprintf("%s has %s: the relay uses none of them", quotedRole, strings.Join(attrs, ", ")),
			"ALTER ROLE "+quotedRole+" NO"+strings.Join(attrs, " NO"))
	}

	var missing, fixes, extra, revokes []string
	opts := migrations.GrantOptions{Cleanup: t.Cleanup}
	grants := migrations.RuntimeGrants(migrations.Table{Schema: t.Schema, Name: t.Table}, database, opts)
	for _, g := range grants {
		lacking, err := lackingPrivileges(ctx, db, g)
		if err != nil {
			r.add("privileges", Fail, err.Error(), "outbox-relay migrate (as an admin) creates the relay's tables")
			return
		}
		if len(lacking) > 0 {
			missing = append(missing, strings.Join(lacking, ", ")+" on "+g.Object)
			fixes = append(fixes, "GRANT "+strings.Join(lacking, ", ")+" ON "+g.Object+" TO "+quotedRole)
		}
	}
	for _, g := range tableGrants(grants) {
		more, err := extraPrivileges(ctx, db, g)
		if err != nil {
			r.add("privileges", Fail, err.Error(), "check the database URL")
			return
		}
		if len(more) > 0 {
			extra = append(extra, strings.Join(more, ", ")+" on "+g.Object)
			revokes = append(revokes, "REVOKE "+strings.Join(more, ", ")+" ON "+g.Object+" FROM "+quotedRole)
		}
	}
	if len(missing) > 0 {
		r.add("privileges", Fail, quotedRole+" lacks "+strings.Join(missing, "; "),
			strings.Join(fixes, "; ")+" (or outbox-relay migrate --grant-role "+role+grantFlags(opts)+" as an admin)")
		return
	}
	if len(extra) > 0 {
		// A table the role owns has every privilege: the fix is then
		// another owner (migrate as an admin).
		r.add("privileges", Warn, quotedRole+" has every privilege the relay uses, and more it never uses: "+strings.Join(extra, "; "),
			strings.Join(revokes, "; ")+" (a table the role owns keeps them: let an admin own the relay's tables)")
		return
	}
	r.add("privileges", Pass, quotedRole+" has exactly the privileges the relay uses on its tables", "")
}

// tableGrants merges the table grants of gs by table, in their order:
// RuntimeGrants may grant one table twice (SELECT, then DELETE for the
// cleanup schedule).
func tableGrants(gs []migrations.Grant) []migrations.Grant {
	var out []migrations.Grant
	at := map[string]int{}
	for _, g := range gs {
		if g.Kind != "TABLE" {
			continue
		}
		if i, ok := at[g.Name]; ok {
			out[i].Privileges += ", " + g.Privileges
			continue
		}
		at[g.Name] = len(out)
		out = append(out, g)
	}
	return out
}

// tablePrivileges are the privileges a table grants (TRUNCATE, DELETE,
// UPDATE: what a leaked relay credential must not do to the outbox).
var tablePrivileges = []string{"SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE", "REFERENCES", "TRIGGER"}

// extraPrivileges returns the table privileges the current role has on
// g's table beyond g's (none for grants on databases and schemas).
func extraPrivileges(ctx context.Context, db DB, g migrations.Grant) ([]string, error) {
	if g.Kind != "TABLE" {
		return nil, nil
	}
	granted := map[string]bool{}
	for _, p := range strings.Split(g.Privileges, ",") {
		granted[strings.ToUpper(strings.TrimSpace(p))] = true
	}
	var extra []string
	for _, p := range tablePrivileges {
		if granted[p] {
			continue
		}
		var ok bool
		if err := db.QueryRow(ctx, `SELECT has_table_privilege(current_user, $1, $2)`, g.Name, p).Scan(&ok); err != nil {
			return nil, fmt.Errorf("check %s on %s: %w", p, g.Object, err)
		}
		if ok {
			extra = append(extra, p)
		}
	}
	return extra, nil
}

func grantFlags(o migrations.GrantOptions) string {
	if o.Cleanup {
		return " --grant-cleanup"
	}
	return ""
}

// lackingPrivileges returns which of g's privileges the current role does
// not have. A table that does not exist is an error: has_table_privilege
// would fail on it with a less helpful message.
func lackingPrivileges(ctx context.Context, db DB, g migrations.Grant) ([]string, error) {
	var fn string
	switch g.Kind {
	case "DATABASE":
		fn = "has_database_privilege"
	case "SCHEMA":
		fn = "has_schema_privilege"
	case "TABLE":
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, g.Name).Scan(&exists); err != nil {
			return nil, fmt.Errorf("look up %s: %w", g.Object, err)
		}
		if !exists {
			return nil, fmt.Errorf("%s does not exist", g.Object)
		}
		fn = "has_table_privilege"
	default:
		return nil, fmt.Errorf("unknown grant kind %q", g.Kind)
	}
	var lacking []string
	for _, p := range strings.Split(g.Privileges, ",") {
		p = strings.TrimSpace(p)
		var ok bool
		if err := db.QueryRow(ctx, `SELECT `+fn+`(current_user, $1, $2)`, g.Name, p).Scan(&ok); err != nil {
			return nil, fmt.Errorf("check %s on %s: %w", p, g.Object, err)
		}
		if !ok {
			lacking = append(lacking, p)
		}
	}
	return lacking, nil
}

// takeover reports which walsenders the role may end: a new leader ends
// the one a cut-off former leader left on the slot (pg_terminate_backend),
// rather than wait for wal_sender_timeout. PostgreSQL lets a role signal
// backends of roles it is a member of, so replicas that all connect as
// this role can; pg_signal_backend widens it to every non-superuser role.
// Without either, a takeover after a cut waits for wal_sender_timeout: a
// pass still, since most deployments run every replica as one role, with
// the reason in the detail.
func takeover(ctx context.Context, db DB, quotedRole string, super bool, r *Report) {
	if super {
		r.add("walsender takeover", Pass, quotedRole+" may end any former leader's walsender", "")
		return
	}
	var signal bool
	err := db.QueryRow(ctx, `SELECT coalesce((SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_catalog.pg_roles WHERE rolname = 'pg_signal_backend'), false)`).
		Scan(&signal)
	switch {
	case err != nil:
		r.add("walsender takeover", Warn, "cannot read membership in pg_signal_backend: "+err.Error(), "check the database URL")
	case signal:
		r.add("walsender takeover", Pass, quotedRole+" is a member of pg_signal_backend: it may end a former leader's walsender of any non-superuser role", "")
	default:
		r.add("walsender takeover", Pass, quotedRole+" may end a former leader's walsender of its own role only: run every replica as "+quotedRole+
			", or a takeover after a network cut waits for wal_sender_timeout", "")
	}
}
