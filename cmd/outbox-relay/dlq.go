package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/publisher"
)

const dlqUsage = `Usage: outbox-relay dlq list|show|retry|discard [flags]

  dlq list [--aggregate A] [--all] [--json]     open (dead and parked) events, in commit order
  dlq show EVENT_ID                             one entry, as JSON
  dlq retry EVENT_ID | --aggregate A            re-publish the aggregate's open events in order;
                                                stops at the first that still fails (exit 1)
  dlq discard EVENT_ID --reason TEXT            discard it (recorded), then re-publish the rest

All are safe while the relay runs: a retry holds the aggregate's lock, and the
relay publishes that aggregate's new events only after it.
`

// dlqSummaries describe each dlq command in its --help.
var dlqSummaries = map[string]string{
	"list": "Lists the open (dead and parked) events of the dead-letter table, in commit order;\n" +
		"--all also lists the resolved (published, discarded) ones.",
	"show": "Shows one dead-letter entry, as JSON.",
	"retry": "Re-publishes the open events of an aggregate (of EVENT_ID, or --aggregate A) in order; stops at\n" +
		"the first that still fails (exit 1). Safe while the relay runs: the retry holds the aggregate's lock.",
	"discard": "Discards a poison event (recorded with --reason), then re-publishes the rest of its aggregate.",
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

func (*dlqListCmd) about(string) about {
	return about{summary: dlqSummaries["list"], scope: config.ScopeDB}
}
func (c *dlqListCmd) run(ctx context.Context, x *invocation) error {
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

func (*dlqShowCmd) about(string) about {
	return about{args: " EVENT_ID", summary: dlqSummaries["show"], scope: config.ScopeDB}
}
func (c *dlqShowCmd) run(ctx context.Context, x *invocation) error {
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
	dlqTarget
	EventID string `arg:"" optional:"" name:"event-id" help:"an event of the aggregate"`
}

func (*dlqRetryCmd) about(string) about {
	return about{args: " EVENT_ID", summary: dlqSummaries["retry"], scope: config.ScopeDB | config.ScopeKafka}
}
func (c *dlqRetryCmd) run(ctx context.Context, x *invocation) error {
	if (c.EventID == "") == (c.Target.AggregateID == "") {
		return fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
	}
	c.Target.EventID = c.EventID
	return republish(ctx, x, func(store *deadletter.Store, w *publisher.SyncWriter) (deadletter.Result, error) {
		agg, err := store.Find(ctx, c.Target)
		if err != nil {
			return deadletter.Result{}, err
		}
		return store.Retry(ctx, agg, w)
	})
}

// dlqDiscardCmd is dlq discard.
type dlqDiscardCmd struct {
	config.LogFlags
	config.DBFlags
	config.KafkaFlags
	Reason  string `name:"reason" help:"why the event is discarded (required, recorded)"`
	EventID string `arg:"" optional:"" name:"event-id" help:"the event"`
}

func (*dlqDiscardCmd) about(string) about {
	return about{args: " EVENT_ID", summary: dlqSummaries["discard"], scope: config.ScopeDB | config.ScopeKafka}
}
func (c *dlqDiscardCmd) run(ctx context.Context, x *invocation) error {
	if c.EventID == "" {
		return fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
	}
	if c.Reason == "" {
		return configError{errors.New("--reason is required: say why the event is discarded")}
	}
	return republish(ctx, x, func(store *deadletter.Store, w *publisher.SyncWriter) (deadletter.Result, error) {
		return store.Discard(ctx, c.EventID, c.Reason, w)
	})
}

// withStore runs f with the dead-letter store of the outbox.
func withStore(ctx context.Context, cfg *config.Config, f func(*deadletter.Store) error) error {
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := deadletter.NewStore(pool, cfg.Table())
	if err := store.Check(ctx); err != nil {
		return err
	}
	return f(store)
}

// republish runs f, a retry or a discard, with a writer that publishes
// the events one at a time on the one Kafka configuration, and prints
// what became of them.
func republish(ctx context.Context, x *invocation, f func(*deadletter.Store, *publisher.SyncWriter) (deadletter.Result, error)) error {
	return withStore(ctx, x.cfg, func(store *deadletter.Store) error {
		w := publisher.NewSyncWriter(x.cfg.PublisherConfig("outbox-relay-dlq"))
		defer w.Close()
		res, err := f(store, w)
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
