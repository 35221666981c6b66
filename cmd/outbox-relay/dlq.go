package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
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

// dlqCommand is the dlq verb: list, show, retry or discard.
func dlqCommand(verb string) command {
	c := command{name: "dlq " + verb, summary: dlqSummaries[verb], scope: scopeDB, args: " EVENT_ID"}
	switch verb {
	case "list":
		c.args = ""
	case "retry", "discard":
		c.scope |= scopeKafka
	}
	c.bind = func(b *envflag.Binder) body {
		var f dlqFlags
		b.Fields(&f.target, "Target.") // deadletter's errors name Target.AggregateType
		if verb == "list" || verb == "retry" {
			b.String(&f.target.AggregateID, "aggregate", "", "aggregate_id")
			b.String(&f.target.AggregateType, "aggregate-type", "", "aggregate_type, when the id is ambiguous")
		}
		if verb == "list" {
			b.Bool(&f.all, "all", false, "include resolved (published, discarded) entries")
			b.Bool(&f.asJSON, "json", false, "print JSON lines")
		}
		if verb == "discard" {
			b.String(&f.reason, "reason", "", "why the event is discarded (required, recorded)")
		}
		return func(ctx context.Context, x *invocation) error {
			if err := f.check(verb, x.args); err != nil {
				return err
			}
			return dlqVerb(ctx, verb, f, x.cfg, x.stdout)
		}
	}
	return c
}

func dlqVerb(ctx context.Context, verb string, f dlqFlags, cfg *config, stdout io.Writer) error {
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := deadletter.NewStore(pool, cfg.table)
	if err := store.Check(ctx); err != nil {
		return err
	}
	switch verb {
	case "list":
		entries, err := store.List(ctx, deadletter.Filter{AggregateID: f.target.AggregateID, AggregateType: f.target.AggregateType, All: f.all})
		if err != nil {
			return err
		}
		for i := range entries {
			entries[i].Reason = cfg.text(entries[i].Reason)
		}
		return deadletter.WriteEntries(stdout, entries, f.asJSON)
	case "show":
		e, err := store.Get(ctx, f.target.EventID)
		if err != nil {
			return err
		}
		e.Reason = cfg.text(e.Reason) // the relay's text: "exceeds Publish.MaxBatchBytes"
		return deadletter.WriteEntry(stdout, e)
	}
	w := dlqWriter(cfg)
	defer w.Close()
	var res deadletter.Result
	if verb == "retry" {
		agg, err := store.Find(ctx, f.target)
		if err != nil {
			return err
		}
		res, err = store.Retry(ctx, agg, w)
		if err != nil {
			return err
		}
	} else if res, err = store.Discard(ctx, f.target.EventID, f.reason, w); err != nil {
		return err
	}
	for i := range res.Outcomes {
		res.Outcomes[i].Error = cfg.text(res.Outcomes[i].Error)
	}
	res.Write(stdout)
	return res.Err()
}

// dlqFlags are the flags and argument of one dlq command.
type dlqFlags struct {
	target      deadletter.Target
	reason      string
	asJSON, all bool
}

// check checks the arguments of dlq verb and takes its EVENT_ID.
func (f *dlqFlags) check(verb string, args []string) error {
	if len(args) > 0 {
		f.target.EventID = args[0]
	}
	switch {
	case verb == "show" && len(args) != 1:
		return fmt.Errorf("%w: dlq show needs one EVENT_ID", errUsage)
	case verb == "retry" && ((f.target.EventID == "") == (f.target.AggregateID == "") || len(args) > 1):
		return fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
	case verb == "discard" && len(args) != 1:
		return fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
	case verb == "discard" && f.reason == "":
		return configError{errors.New("--reason is required: say why the event is discarded")}
	}
	return nil
}

// dlqWriter publishes the events of dlq retry and discard, one at a time,
// on the one Kafka configuration.
func dlqWriter(cfg *config) *publisher.SyncWriter {
	return publisher.NewSyncWriter(cfg.publisherConfig("outbox-relay-dlq"))
}
