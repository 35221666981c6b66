package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/slot"
)

// dlqWait are the flags of the commands that re-publish.
type dlqWait struct {
	config.StandbyFlags
	Wait time.Duration `name:"wait" default:"${dlq_wait}" help:"how long to wait for the relay's position (checkpoint or slot) to pass the aggregate's earliest open event before refusing (0: refuse at once)"`
}

// dlqTarget are the flags that name a dead-letter entry's aggregate
// (deadletter's errors name them Target.AggregateType).
type dlqTarget struct {
	Aggregate     string            `name:"aggregate" help:"aggregate_id" to:"Target.AggregateID"`
	AggregateType string            `name:"aggregate-type" help:"aggregate_type, when the id is ambiguous" to:"Target.AggregateType"`
	Target        deadletter.Target `kong:"-"`
}

// dlqListCmd is dlq list.
type dlqListCmd struct {
	config.LogFlags
	config.DBFlags
	dlqTarget
	All  bool `name:"all" help:"include resolved (published, discarded) entries"`
	JSON bool `name:"json" help:"print JSON lines"`
}

func (c *dlqListCmd) Run(ctx context.Context, x *invocation) error {
	return withStore(ctx, x.cfg, func(store *deadletter.Store) error {
		entries, err := store.List(ctx, deadletter.Filter{AggregateID: c.Target.AggregateID, AggregateType: c.Target.AggregateType, All: c.All})
		for i := range entries {
			entries[i].Reason = x.cfg.Text(entries[i].Reason) // the relay's: "exceeds Publish.MaxBatchBytes"
		}
		if err != nil {
			return err
		}
		return deadletter.WriteEntries(x.stdout, entries, c.JSON)
	})
}

// dlqShowCmd is dlq show.
type dlqShowCmd struct {
	config.LogFlags
	config.DBFlags
	EventID string `arg:"" optional:"" name:"event-id" help:"the event"`
}

func (c *dlqShowCmd) Run(ctx context.Context, x *invocation) error {
	if c.EventID == "" {
		return fmt.Errorf("%w: dlq show needs one EVENT_ID", errUsage)
	}
	return withStore(ctx, x.cfg, func(store *deadletter.Store) error {
		e, err := store.Get(ctx, c.EventID)
		if err != nil {
			return err
		}
		e.Reason = x.cfg.Text(e.Reason)
		return deadletter.WriteEntry(x.stdout, e)
	})
}

// dlqRetryCmd is dlq retry.
type dlqRetryCmd struct {
	config.LogFlags
	config.DBFlags
	config.KafkaFlags
	config.PublishFlags
	dlqTarget
	dlqWait
	EventID string `arg:"" optional:"" name:"event-id" help:"an event of the aggregate"`
}

func (c *dlqRetryCmd) Run(ctx context.Context, x *invocation) error {
	if (c.EventID == "") == (c.Target.AggregateID == "") {
		return fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
	}
	c.Target.EventID = c.EventID
	return republish(ctx, x, c.dlqWait, func(store *deadletter.Store, w *publisher.SyncWriter, g deadletter.Guard) (deadletter.Result, error) {
		agg, err := store.Find(ctx, c.Target)
		if err != nil {
			return deadletter.Result{}, err
		}
		return store.Retry(ctx, agg, w, g)
	})
}

// dlqDiscardCmd is dlq discard.
type dlqDiscardCmd struct {
	config.LogFlags
	config.DBFlags
	config.KafkaFlags
	config.PublishFlags
	dlqWait
	Reason  string `name:"reason" help:"why the event is discarded (required, recorded)"`
	EventID string `arg:"" optional:"" name:"event-id" help:"the event"`
}

func (c *dlqDiscardCmd) Run(ctx context.Context, x *invocation) error {
	if c.EventID == "" {
		return fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
	}
	if c.Reason == "" {
		return configError{errors.New("--reason is required: say why the event is discarded")}
	}
	return republish(ctx, x, c.dlqWait, func(store *deadletter.Store, w *publisher.SyncWriter, g deadletter.Guard) (deadletter.Result, error) {
		return store.Discard(ctx, c.EventID, c.Reason, w, g)
	})
}

// withStore runs f with the dead-letter store of the outbox.
func withStore(ctx context.Context, cfg *config.Config, f func(*deadletter.Store) error) error {
	return withPool(ctx, cfg, func(_ *pgxpool.Pool, store *deadletter.Store) error { return f(store) })
}

// withPool runs f with the pool and the dead-letter store of the outbox.
func withPool(ctx context.Context, cfg *config.Config, f func(*pgxpool.Pool, *deadletter.Store) error) error {
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := deadletter.NewStore(pool, cfg.Table())
	if err := store.Check(ctx); err != nil {
		return err
	}
	return f(pool, store)
}

// republish runs f, a retry or a discard, with a writer that publishes
// the events one at a time on the one Kafka configuration and the guard
// that keeps them behind the relay's position (read from the slot's
// checkpoints and the slot, on the standby with --replication-url), and
// prints what became of them.
func republish(ctx context.Context, x *invocation, wait dlqWait, f func(*deadletter.Store, *publisher.SyncWriter, deadletter.Guard) (deadletter.Result, error)) error {
	return withPool(ctx, x.cfg, func(pool *pgxpool.Pool, store *deadletter.Store) error {
		d := x.cfg.Relay.Database
		slots, closeStandby, err := x.cfg.SlotManager(ctx, pool, slot.Config{Name: d.Slot, Publication: d.Publication})
		if err != nil {
			return err
		}
		defer closeStandby()
		g := deadletter.Guard{
			Progress: deadletter.RelayPosition{DB: pool, Checkpoints: checkpoint.NewStore(pool, x.cfg.Table(), d.Slot), Slot: slots, SlotName: d.Slot},
			Wait:     wait.Wait, Log: newLogger(x.cfg, x.stderr),
		}
		w := dlqPublish(x.cfg).SyncWriter()
		defer w.Close()
		res, err := f(store, w, g)
		if err != nil {
			return err
		}
		for i := range res.Outcomes {
			res.Outcomes[i].Error = x.cfg.Text(res.Outcomes[i].Error)
		}
		res.Write(x.stdout)
		return res.Err()
	})
}

// dlqPublish is what dlq retry and discard write with: the relay's
// publish configuration, one event at a time, without the idempotent
// producer (publisher.SyncWriter has none), so --idempotent is refused.
func dlqPublish(cfg *config.Config) kafkaclients.Publish {
	p := cfg.Publish("outbox-relay-dlq")
	p.Config.NoIdempotence = true
	return p
}
