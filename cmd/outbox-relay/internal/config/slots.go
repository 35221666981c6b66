package config

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/slot"
)

// SlotManager is the manager of the configured slot (sc) on pool, the
// primary, or with --replication-url on that standby, pool being its
// primary. close releases the standby's connections (nothing without).
func (c *Config) SlotManager(ctx context.Context, pool *pgxpool.Pool, sc slot.Config) (m *slot.Manager, close func(), err error) {
	url := c.Relay.Database.ReplicationURL
	if url == "" {
		return slot.NewManager(pool, sc), func() {}, nil
	}
	pc, err := outboxdb.ParseConfig(url) // valid: Validate parsed it
	if err != nil {
		return nil, nil, fmt.Errorf("--replication-url: %w", err)
	}
	outboxdb.SetBeforeConnect(pc, c.Relay.Database.BeforeConnect)
	standby, err := outboxdb.Connect(ctx, pc)
	if err != nil {
		return nil, nil, fmt.Errorf("the standby of --replication-url: %w", err)
	}
	sc.Primary = pool
	return slot.NewManager(standby, sc), standby.Close, nil
}
