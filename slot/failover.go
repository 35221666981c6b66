package slot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// FailoverVersion is the first server_version_num with failover slots
// (PostgreSQL 17): a logical slot created with failover = true is copied
// to standbys that run with sync_replication_slots = on, so after a
// failover the promoted standby has the slot and the relay resumes there.
// Before 17 a failover loses the slot and the events after its position
// must be back-filled (outbox-relay recover).
const FailoverVersion = 170000

// Config names a slot and its publication, and says how the slot is
// created (NewManager's Create and Ensure, CreateExported).
type Config struct {
	// Name is the logical replication slot's name.
	Name string
	// Publication is the publication the slot streams (Manager only).
	Publication string
	// NoFailover creates the slot without failover = true on PostgreSQL
	// 17 and later. By default (false) it is a failover slot: standbys
	// with sync_replication_slots = on then keep a copy, so a failover
	// does not lose it. Turn failover off only where no standby may ever
	// take over, or where the primary's synchronized_standby_slots must
	// not hold the relay back (a failover slot's changes wait for the
	// standbys it names). Before 17 it changes nothing: those servers
	// have no failover slots. The negative form keeps the zero Config's
	// default the safe one, as relay.DatabaseConfig.NoFailoverSlot does.
	NoFailover bool
	// Primary is the primary of a standby the slot is created on
	// (decoding on a standby, PostgreSQL 16+). A standby creates a
	// logical slot only once a running-transactions record arrives from
	// the primary, which an idle primary writes rarely: Create asks the
	// primary for one (pg_log_standby_snapshot) until the slot exists;
	// so does CreateExported. Nil for a slot on a primary.
	Primary DB
}

// ServerVersion reads server_version_num, e.g. 170006 for 17.6.
func ServerVersion(ctx context.Context, db DB) (int, error) {
	var v int
	if err := db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read server_version_num: %w", err)
	}
	return v, nil
}

// SetFailover sets the failover flag of the existing slot name to on with
// ALTER_REPLICATION_SLOT over conn, a replication connection
// (replication=database) to a PostgreSQL 17+ primary. There is no SQL
// function for it. The server refuses while the slot is active: the
// relay streaming from it must be stopped first (ActiveError).
func SetFailover(ctx context.Context, conn *pgconn.PgConn, name string, on bool) error {
	sql := fmt.Sprintf("ALTER_REPLICATION_SLOT %s (FAILOVER %t)", quoteIdent(name), on)
	if _, err := conn.Exec(ctx, sql).ReadAll(); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "55006" { // object_in_use: active for a PID
			return fmt.Errorf("set failover = %t on slot %q: %w; stop the relay streaming from it, then run %s again",
				on, name, err, failoverCommand(on))
		}
		return fmt.Errorf("set failover = %t on slot %q: %w", on, name, err)
	}
	return nil
}

// failoverCommand is the outbox-relay command that sets failover = on, for
// messages that say what to run.
func failoverCommand(on bool) string {
	if on {
		return "outbox-relay migrate --failover-slot"
	}
	return "outbox-relay migrate --failover-slot=false"
}

// failoverOn reports whether a slot created on a server of version v is a
// failover slot: asked for, and a server that has them.
func (c Config) failoverOn(v int) bool {
	return !c.NoFailover && v >= FailoverVersion
}
