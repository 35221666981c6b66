package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/migrateslot"
	"github.com/outbox-relay/outbox-relay/replication"
)

// failover is migrate's reconciliation of an existing slot's failover
// flag with --failover-slot (migrateslot.Failover).
func (c *config) failover() migrateslot.Failover {
	return migrateslot.Failover{Slot: c.Relay.Database.Slot, Want: c.failoverSlot(), Set: c.failoverSlotSet,
		Connect: func(ctx context.Context) (*pgconn.PgConn, error) {
			return replication.Connect(ctx, c.Relay.Database.URL, c.replOpts()...)
		}}
}
