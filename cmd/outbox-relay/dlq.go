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

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || isHelp(args[0]) {
		_, err := groupVerb(args, dlqUsage, stderr, nil)
		return err
	}
	verb := args[0]
	cfg, f, err := parseDLQ(verb, args[1:], stderr)
	if err != nil {
		return err
	}
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

// parseDLQ parses the flags of dlq verb and checks its argument.
func parseDLQ(verb string, args []string, stderr io.Writer) (*config, dlqFlags, error) {
	var f dlqFlags
	s, argsUsage := scopeDB, " EVENT_ID"
	switch verb {
	case "list":
		argsUsage = ""
	case "show":
	case "retry", "discard":
		s |= scopeKafka
	default:
		fmt.Fprint(stderr, dlqUsage)
		return nil, f, fmt.Errorf("%w: unknown dlq command %q", errUsage, verb)
	}
	cfg, rest, err := parseWith("dlq "+verb, argsUsage, dlqSummaries[verb], args, s, stderr, func(b *envflag.Binder) {
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
	})
	if err != nil {
		return nil, f, err
	}
	if len(rest) > 0 {
		f.target.EventID = rest[0]
	}
	switch {
	case verb == "show" && len(rest) != 1:
		return nil, f, fmt.Errorf("%w: dlq show needs one EVENT_ID", errUsage)
	case verb == "retry" && ((f.target.EventID == "") == (f.target.AggregateID == "") || len(rest) > 1):
		return nil, f, fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
	case verb == "discard" && len(rest) != 1:
		return nil, f, fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
	case verb == "discard" && f.reason == "":
		return nil, f, configError{errors.New("--reason is required: say why the event is discarded")}
	}
	return cfg, f, nil
}

// dlqWriter publishes the events of dlq retry and discard, one at a time,
// on the one Kafka configuration.
func dlqWriter(cfg *config) *publisher.SyncWriter {
	return publisher.NewSyncWriter(cfg.publisherConfig("outbox-relay-dlq"))
}
