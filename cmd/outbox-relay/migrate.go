package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/migrateslot"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/internal/pgprovider"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parse("migrate",
		"Creates or upgrades the outbox table (versioned, idempotent), the publication (publish = 'insert')\n"+
			"and the logical replication slot, so events committed from now on are retained until relayed; on PostgreSQL 17+\n"+
			"the slot is a failover slot (--failover-slot; given explicitly, it also sets an existing slot's flag).\n"+
			"With --grant-role NAME it also creates the least-privilege role `run` needs (LOGIN REPLICATION) and\n"+
			"grants it exactly the table privileges listed in the README; run it as a superuser (on a managed service,\n"+
			"its admin role) for that. On RDS and Aurora the role gets membership in rds_replication instead of\n"+
			"REPLICATION; on a managed service it also prints what only the provider's console can do.",
		args, scopeDB|scopeMigrate, stderr)
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr)
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := slot.CheckServer(ctx, pool, log); err != nil {
		return err
	}
	applied, err := migrations.Apply(ctx, pool, cfg.table, migrations.ApplyOptions{PayloadType: cfg.PayloadType, NullablePayload: cfg.NullablePayload})
	if err != nil {
		return err
	}
	if _, err := migrations.Validate(ctx, pool, cfg.table); err != nil {
		return err
	}
	m := slot.NewManager(pool, slot.Config{Name: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication, NoFailover: cfg.Relay.Database.NoFailoverSlot})
	if err := m.EnsurePartitionRoot(ctx, cfg.table.Quoted()); err != nil {
		return err
	}
	if err := m.EnsurePublication(ctx, cfg.table.Quoted(), cfg.table.Schema, cfg.table.Name); err != nil {
		return err
	}
	st, err := m.Status(ctx)
	if errors.Is(err, slot.ErrSlotNotFound) {
		st, err = m.Create(ctx)
	}
	if err != nil {
		return err
	}
	if err := m.Check(ctx, st); err != nil {
		var active *slot.ActiveError
		if !errors.As(err, &active) { // a running relay is fine here
			return err
		}
	}
	if err := cfg.failover().Reconcile(ctx, pool, &st, stdout); err != nil {
		return err
	}
	if cfg.GrantRole != "" {
		prov, err := pgprovider.Detect(ctx, pool)
		if err != nil {
			return err
		}
		opts := migrations.GrantOptions{Cleanup: cfg.GrantCleanup, ReplicationRole: prov.ReplicationRole()}
		created, grants, err := migrations.GrantRuntimeRole(ctx, pool, cfg.GrantRole, cfg.table, opts)
		if err != nil {
			return err
		}
		right := "REPLICATION"
		if opts.ReplicationRole != "" {
			right = "member of " + opts.ReplicationRole
		}
		verb := "exists, has " + right
		if created {
			verb = "created (LOGIN, " + right + ", no password: ALTER ROLE " + cfg.GrantRole + " PASSWORD '...' or use certificates)"
		}
		fmt.Fprintf(stdout, "role %s %s; granted:\n", cfg.GrantRole, verb)
		for _, g := range grants {
			fmt.Fprintf(stdout, "  %s ON %s  -- %s\n", g.Privileges, g.Object, cfg.text(g.Why))
		}
		if attrs, err := migrations.UnusedRoleAttributes(ctx, pool, cfg.GrantRole); err != nil {
			return err
		} else if len(attrs) > 0 {
			// Granted REPLICATION on top of them: say so, not silently.
			q := pgx.Identifier{cfg.GrantRole}.Sanitize()
			fmt.Fprintf(stdout, "warning: role %s also has %s, which the relay never uses: ALTER ROLE %s NO%s\n",
				cfg.GrantRole, strings.Join(attrs, ", "), q, strings.Join(attrs, " NO"))
		}
		if notes := prov.GrantRoleNotes(pgx.Identifier{cfg.GrantRole}.Sanitize()); len(notes) > 0 {
			fmt.Fprintf(stdout, "on %s (what only its console or tooling can do, and what differs):\n", prov.Name())
			for _, n := range notes {
				fmt.Fprintf(stdout, "  - %s\n", cfg.text(n))
			}
		}
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "table %s is up to date\n", cfg.table)
	} else {
		fmt.Fprintf(stdout, "table %s: applied migrations %v\n", cfg.table, applied)
	}
	fmt.Fprintf(stdout, "publication %s and slot %s are ready (confirmed_flush_lsn %s)%s\n", cfg.Relay.Database.Publication, cfg.Relay.Database.Slot, st.ConfirmedFlushLSN, migrateslot.Note(st))
	return nil
}

func connectPool(ctx context.Context, cfg *config) (*pgxpool.Pool, error) {
	pc, err := outboxdb.ParseConfig(cfg.Relay.Database.URL)
	if err != nil {
		return nil, configError{fmt.Errorf("--database-url: %w", err)}
	}
	outboxdb.SetBeforeConnect(pc, cfg.Relay.Database.BeforeConnect)
	return outboxdb.Connect(ctx, pc)
}

// replOpts are the replication connections' options: the credentials
// hook of --database-password-file or --database-auth.
func (c *config) replOpts() []replication.Option {
	return []replication.Option{replication.WithBeforeConnect(c.Relay.Database.BeforeConnect)} // nil: none
}
