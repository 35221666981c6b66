package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/migrate"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// migrateCmd is migrate.
type migrateCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
	config.MigrateFlags
}

func (*migrateCmd) Run(ctx context.Context, x *invocation) error {
	cfg, stdout, stderr := x.cfg, x.stdout, x.stderr
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	d := cfg.Relay.Database
	slots, closeStandby, err := cfg.SlotManager(ctx, pool, slot.Config{Name: d.Slot, Publication: d.Publication, NoFailover: d.NoFailoverSlot})
	if err != nil {
		return err
	}
	defer closeStandby()
	return migrate.Run(ctx, pool, migrate.Options{
		Table: cfg.Table(),
		Slots: slots, Publication: d.Publication,
		Failover: migrate.Failover{Slot: d.Slot, Want: !d.NoFailoverSlot, Set: cfg.FailoverSlotSet,
			Connect: func(ctx context.Context) (*pgconn.PgConn, error) {
				return replication.Connect(ctx, d.URL, cfg.ReplOpts()...)
			}},
		Apply: migrations.ApplyOptions{PayloadType: cfg.PayloadType, NullablePayload: cfg.NullablePayload},
		Grant: migrate.Grant{Role: cfg.GrantRole, Cleanup: cfg.GrantCleanup},
		Text:  cfg.Text,
	}, newLogger(cfg, stderr), stdout)
}

func connectPool(ctx context.Context, cfg *config.Config) (*pgxpool.Pool, error) {
	pc, err := outboxdb.ParseConfig(cfg.Relay.Database.URL)
	if err != nil {
		return nil, configError{fmt.Errorf("--database-url: %w", err)}
	}
	outboxdb.SetBeforeConnect(pc, cfg.Relay.Database.BeforeConnect)
	return outboxdb.Connect(ctx, pc)
}
