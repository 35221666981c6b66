// Package migrate is what `outbox-relay migrate` does: it creates or
// upgrades the outbox table, the publication and the slot, reconciles an
// existing slot's failover flag with --failover-slot, and with
// --grant-role creates the relay's least-privilege role and reports what
// it granted.
package migrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/slot"
)

// Options are migrate's settings, from its flags.
type Options struct {
	// Table is the outbox table (--table).
	Table migrations.Table
	// Slots manages the slot and publication and says how a missing slot
	// is created (--slot, --publication, --failover-slot): on the primary,
	// or on the standby the relay decodes from (--replication-url).
	Slots *slot.Manager
	// Publication is the publication's name, for the report.
	Publication string
	// Failover reconciles an existing slot's failover flag.
	Failover Failover
	// Apply is the table's creation: payload type and nullability.
	Apply migrations.ApplyOptions
	// Grant is --grant-role's role and --grant-cleanup; a zero Role grants
	// nothing.
	Grant Grant
	// Text names the configuration fields of library text by the flags
	// that set them.
	Text func(string) string
}

// Run migrates on pool and reports on out what it did.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options, log *slog.Logger, out io.Writer) error {
	if err := slot.CheckServer(ctx, pool, log); err != nil {
		return err
	}
	applied, err := migrations.Apply(ctx, pool, o.Table, o.Apply)
	if err != nil {
		return err
	}
	if _, err := migrations.Validate(ctx, pool, o.Table); err != nil {
		return err
	}
	m := o.Slots
	if err := m.EnsurePartitionRoot(ctx, o.Table.Quoted()); err != nil {
		return err
	}
	if err := m.EnsurePublication(ctx, o.Table.Quoted(), o.Table.Schema, o.Table.Name); err != nil {
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
	// A standby's slot has no failover flag: it survives the standby's own
	// promotion, and the primary's failover is the standby's to follow.
	if !st.OnStandby {
		if err := o.Failover.Reconcile(ctx, pool, &st, out); err != nil {
			return err
		}
	}
	if o.Grant.Role != "" {
		if err := o.Grant.run(ctx, pool, o.Table, o.Text, out); err != nil {
			return err
		}
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "table %s is up to date\n", o.Table)
	} else {
		fmt.Fprintf(out, "table %s: applied migrations %v\n", o.Table, applied)
	}
	where := ""
	if st.OnStandby {
		where = " on the standby"
	}
	fmt.Fprintf(out, "publication %s and slot %s%s are ready (confirmed_flush_lsn %s)%s\n", o.Publication, st.Name, where, st.ConfirmedFlushLSN, Note(st))
	return nil
}
