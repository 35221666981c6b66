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
// the relay holds production credentials and needs far less.
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
	if super {
		return // has_*_privilege is always true for a superuser
	}

	var missing []string
	var fixes []string
	opts := migrations.GrantOptions{Cleanup: t.Cleanup}
	for _, g := range migrations.RuntimeGrants(migrations.Table{Schema: t.Schema, Name: t.Table}, database, opts) {
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
	if len(missing) > 0 {
		r.add("privileges", Fail, quotedRole+" lacks "+strings.Join(missing, "; "),
			strings.Join(fixes, "; ")+" (or outbox-relay migrate --grant-role "+role+grantFlags(opts)+" as an admin)")
		return
	}
	r.add("privileges", Pass, quotedRole+" has every privilege the relay uses", "")
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
