package migrate

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/slot"
)

// Failover is what migrate was asked about the slot's failover flag.
type Failover struct {
	// Slot is the slot's name.
	Slot string
	// Want is --failover-slot; Set says it was given (flag or
	// environment) rather than left at its default.
	Want, Set bool
	// Connect opens a replication connection, for
	// ALTER_REPLICATION_SLOT.
	Connect func(ctx context.Context) (*pgconn.PgConn, error)
}

// Reconcile reconciles an existing slot's failover flag (st) with f on
// PostgreSQL 17+. Only a value given explicitly changes the slot:
// enabling it makes the relay's changes wait for the standbys in
// synchronized_standby_slots, which an operator should choose, not
// receive with an upgrade. Otherwise a slot without the flag only gets a
// hint on out. ALTER_REPLICATION_SLOT fails on an active slot, so it
// refuses up front while a relay streams from it and says to stop the
// relay first: the change is not deferred to the relay's next start,
// which never alters an existing slot.
func (f Failover) Reconcile(ctx context.Context, db slot.DB, st *slot.Status, out io.Writer) error {
	v, err := slot.ServerVersion(ctx, db)
	if err != nil {
		return err
	}
	switch {
	case v < slot.FailoverVersion:
		if f.Set && f.Want {
			fmt.Fprintf(out, "--failover-slot ignored: PostgreSQL %d has no failover slots (they need 17); a failover loses slot %s (outbox-relay recover back-fills)\n",
				v/10000, f.Slot)
		}
		return nil
	case st.Failover == f.Want:
		return nil
	case !f.Set:
		if !st.Failover {
			fmt.Fprintf(out, "slot %s has failover = false: a failover to a standby loses it; to keep it on standbys "+
				"(sync_replication_slots = on), stop the relay and run outbox-relay migrate --failover-slot\n", f.Slot)
		}
		return nil
	case st.Active:
		again := "--failover-slot"
		if !f.Want {
			again += "=false"
		}
		return fmt.Errorf("slot %q is active under pid %d: its failover flag can only change while nothing streams from it; "+
			"stop the relay, run outbox-relay migrate %s again, then start the relay", f.Slot, st.ActivePID, again)
	}
	conn, err := f.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := slot.SetFailover(ctx, conn, f.Slot, f.Want); err != nil {
		return err
	}
	st.Failover = f.Want
	fmt.Fprintf(out, "slot %s: failover set to %t\n", f.Slot, f.Want)
	return nil
}

// Note ends the line announcing a created slot.
func Note(st slot.Status) string {
	if st.Failover {
		return " (failover slot: standbys with sync_replication_slots = on keep a copy)"
	}
	return ""
}
