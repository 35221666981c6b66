package main

import (
	"context"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// migrateFailover reconciles an existing slot's failover flag with
// --failover-slot on PostgreSQL 17+. Only a value given explicitly (flag
// or environment) changes the slot: enabling it makes the relay's changes
// wait for the standbys in synchronized_standby_slots, which an operator
// should choose, not receive with an upgrade. Otherwise a slot without the
// flag only gets a hint. ALTER_REPLICATION_SLOT fails on an active slot,
// so migrate refuses up front while a relay streams from it and says to
// stop the relay first: the change is not deferred to the relay's next
// start, which never alters an existing slot.
func migrateFailover(ctx context.Context, cfg *config, db slot.DB, st *slot.Status, stdout io.Writer) error {
	v, err := slot.ServerVersion(ctx, db)
	if err != nil {
		return err
	}
	switch {
	case v < slot.FailoverVersion:
		if cfg.failoverSlotSet && cfg.failoverSlot() {
			fmt.Fprintf(stdout, "--failover-slot ignored: PostgreSQL %d has no failover slots (they need 17); a failover loses slot %s (outbox-relay recover back-fills)\n",
				v/10000, cfg.Relay.Database.Slot)
		}
		return nil
	case st.Failover == cfg.failoverSlot():
		return nil
	case !cfg.failoverSlotSet:
		if !st.Failover {
			fmt.Fprintf(stdout, "slot %s has failover = false: a failover to a standby loses it; to keep it on standbys "+
				"(sync_replication_slots = on), stop the relay and run outbox-relay migrate --failover-slot\n", cfg.Relay.Database.Slot)
		}
		return nil
	case st.Active:
		again := "--failover-slot"
		if !cfg.failoverSlot() {
			again += "=false"
		}
		return fmt.Errorf("slot %q is active under pid %d: its failover flag can only change while nothing streams from it; "+
			"stop the relay, run outbox-relay migrate %s again, then start the relay", cfg.Relay.Database.Slot, st.ActivePID, again)
	}
	conn, err := replication.Connect(ctx, cfg.Relay.Database.URL, cfg.replOpts()...)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if err := slot.SetFailover(ctx, conn, cfg.Relay.Database.Slot, cfg.failoverSlot()); err != nil {
		return err
	}
	st.Failover = cfg.failoverSlot()
	fmt.Fprintf(stdout, "slot %s: failover set to %t\n", cfg.Relay.Database.Slot, cfg.failoverSlot())
	return nil
}

// failoverNote ends the line announcing a created slot.
func failoverNote(st slot.Status) string {
	if st.Failover {
		return " (failover slot: standbys with sync_replication_slots = on keep a copy)"
	}
	return ""
}
