package migrate

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Grant is the least-privilege role migrate creates for `run`
// (--grant-role) and whether it may delete (--grant-cleanup).
type Grant struct {
	Role    string
	Cleanup bool
}

// run creates (if missing) g.Role and grants it what the relay needs on
// the server's provider (REPLICATION, or membership in RDS's
// rds_replication), then says on out what it granted and why, what else
// the role may do that the relay never uses, and what only the
// provider's console can do. text names fields by their flags.
func (g Grant) run(ctx context.Context, pool *pgxpool.Pool, table migrations.Table, text func(string) string, out io.Writer) error {
	prov, err := pgprovider.Detect(ctx, pool)
	if err != nil {
		return err
	}
	opts := migrations.GrantOptions{Cleanup: g.Cleanup, ReplicationRole: prov.ReplicationRole()}
	created, grants, err := migrations.GrantRuntimeRole(ctx, pool, g.Role, table, opts)
	if err != nil {
		return err
	}
	right := "REPLICATION"
	if opts.ReplicationRole != "" {
		right = "member of " + opts.ReplicationRole
	}
	verb := "exists, has " + right
	if created {
		verb = "created (LOGIN, " + right + ", no password: ALTER ROLE " + g.Role + " PASSWORD '...' or use certificates)"
	}
	fmt.Fprintf(out, "role %s %s; granted:\n", g.Role, verb)
	for _, gr := range grants {
		fmt.Fprintf(out, "  %s ON %s  -- %s\n", gr.Privileges, gr.Object, text(gr.Why))
	}
	q := pgx.Identifier{g.Role}.Sanitize()
	if attrs, err := migrations.UnusedRoleAttributes(ctx, pool, g.Role); err != nil {
		return err
	} else if len(attrs) > 0 {
		// Granted REPLICATION on top of them: say so, not silently.
		fmt.Fprintf(out, "warning: role %s also has %s, which the relay never uses: ALTER ROLE %s NO%s\n",
			g.Role, strings.Join(attrs, ", "), q, strings.Join(attrs, " NO"))
	}
	if notes := prov.GrantRoleNotes(q); len(notes) > 0 {
		fmt.Fprintf(out, "on %s (what only its console or tooling can do, and what differs):\n", prov.Name())
		for _, n := range notes {
			fmt.Fprintf(out, "  - %s\n", text(n))
		}
	}
	return nil
}
