package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

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

func cmdDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, dlqUsage)
		if len(args) == 0 {
			return errUsage
		}
		return nil
	}
	verb := args[0]
	var target deadletter.Target
	var reason string
	var asJSON, all bool
	s := scopeDB
	argsUsage := ""
	switch verb {
	case "list":
	case "show":
		argsUsage = " EVENT_ID"
	case "retry", "discard":
		s |= scopeKafka
		argsUsage = " EVENT_ID"
	default:
		fmt.Fprint(stderr, dlqUsage)
		return fmt.Errorf("%w: unknown dlq command %q", errUsage, verb)
	}
	cfg, rest, err := parseWith("dlq "+verb, argsUsage, dlqUsage, args[1:], s, stderr, func(fs *flag.FlagSet) {
		if verb == "list" || verb == "retry" {
			fs.StringVar(&target.AggregateID, "aggregate", "", "aggregate_id")
			fs.StringVar(&target.AggregateType, "aggregate-type", "", "aggregate_type, when the id is ambiguous")
		}
		if verb == "list" {
			fs.BoolVar(&all, "all", false, "include resolved (published, discarded) entries")
			fs.BoolVar(&asJSON, "json", false, "print JSON lines")
		}
		if verb == "discard" {
			fs.StringVar(&reason, "reason", "", "why the event is discarded (required, recorded)")
		}
	})
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
	if len(rest) > 0 {
		target.EventID = rest[0]
	}
	var res deadletter.Result
	switch verb {
	case "list":
		entries, err := store.List(ctx, deadletter.Filter{AggregateID: target.AggregateID, AggregateType: target.AggregateType, All: all})
		if err != nil {
			return err
		}
		return deadletter.WriteEntries(stdout, entries, asJSON)
	case "show":
		if len(rest) != 1 {
			return fmt.Errorf("%w: dlq show needs one EVENT_ID", errUsage)
		}
		e, err := store.Get(ctx, target.EventID)
		if err != nil {
			return err
		}
		return deadletter.WriteEntry(stdout, e)
	case "retry":
		if (target.EventID == "") == (target.AggregateID == "") || len(rest) > 1 {
			return fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
		}
		agg, err := store.Find(ctx, target)
		if err != nil {
			return err
		}
		w := dlqWriter(cfg)
		defer w.Close()
		if res, err = store.Retry(ctx, agg, w); err != nil {
			return err
		}
	case "discard":
		if len(rest) != 1 {
			return fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
		}
		if reason == "" {
			return configError{errors.New("--reason is required: say why the event is discarded")}
		}
		w := dlqWriter(cfg)
		defer w.Close()
		if res, err = store.Discard(ctx, target.EventID, reason, w); err != nil {
			return err
		}
	}
	res.Write(stdout)
	return res.Err()
}

// dlqWriter publishes the events of dlq retry and discard, one at a time,
// on the one Kafka configuration.
func dlqWriter(cfg *config) *publisher.SyncWriter {
	return publisher.NewSyncWriter(cfg.publisherConfig("outbox-relay-dlq"))
}
