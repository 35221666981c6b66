package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"unicode/utf8"

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
	var aggregate, aggType, reason string
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
			fs.StringVar(&aggregate, "aggregate", "", "aggregate_id")
			fs.StringVar(&aggType, "aggregate-type", "", "aggregate_type, when the id is ambiguous")
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
	eventID := ""
	if len(rest) > 0 {
		eventID = rest[0]
	}
	switch verb {
	case "list":
		entries, err := store.List(ctx, deadletter.Filter{AggregateID: aggregate, AggregateType: aggType, All: all})
		if err != nil {
			return err
		}
		return printEntries(stdout, entries, asJSON)
	case "show":
		if len(rest) != 1 {
			return fmt.Errorf("%w: dlq show needs one EVENT_ID", errUsage)
		}
		e, err := store.Get(ctx, eventID)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(entryJSON(e))
	}

	w := publisher.NewSyncWriter(publisher.Config{
		Brokers: cfg.brokers, Template: cfg.template, MaxBatchBytes: cfg.MaxBatchBytes,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		Transport: cfg.kafkaTransport("outbox-relay-dlq"),
	})
	defer w.Close()
	var res deadletter.Result
	switch verb {
	case "retry":
		if (eventID == "") == (aggregate == "") || len(rest) > 1 {
			return fmt.Errorf("%w: dlq retry needs EVENT_ID or --aggregate A", errUsage)
		}
		var agg deadletter.Aggregate
		if eventID != "" {
			e, err := store.Get(ctx, eventID)
			if err != nil {
				return err
			}
			agg = e.Aggregate
		} else if agg, err = store.FindAggregate(ctx, aggregate, aggType); err != nil {
			return err
		}
		res, err = store.Retry(ctx, agg, w)
	case "discard":
		if len(rest) != 1 {
			return fmt.Errorf("%w: dlq discard needs one EVENT_ID and --reason", errUsage)
		}
		if reason == "" {
			return configError{errors.New("--reason is required: say why the event is discarded")}
		}
		res, err = store.Discard(ctx, eventID, reason, w)
	}
	if err != nil {
		return err
	}
	for _, o := range res.Outcomes {
		if o.Error != "" {
			fmt.Fprintf(stdout, "%s\tstill failing: %s\n", o.EventID, o.Error)
		} else {
			fmt.Fprintf(stdout, "%s\t%s\n", o.EventID, o.Status)
		}
	}
	if res.Failed() {
		return fmt.Errorf("aggregate %s stays quarantined: an event still fails", res.Aggregate)
	}
	fmt.Fprintf(stdout, "aggregate %s: quarantine lifted (%d events re-published)\n", res.Aggregate, len(res.Outcomes))
	return nil
}

func entryJSON(e deadletter.Entry) map[string]any {
	m := map[string]any{
		"event_id": e.EventID, "aggregate_type": e.Aggregate.Type, "aggregate_id": e.Aggregate.ID,
		"aggregate_version": e.AggregateVersion, "event_type": e.EventType, "schema_version": e.SchemaVersion,
		"headers": e.Headers, "topic": e.Topic, "tx_lsn": e.Pos.TxLSN.String(), "tx_ordinal": e.Pos.Ordinal,
		"commit_time": e.CommitTime, "status": e.Status, "reason": e.Reason, "class": e.Class,
		"attempts": e.Attempts, "first_failed_at": e.FirstFailedAt, "last_failed_at": e.LastFailedAt,
		"resolved_at": e.ResolvedAt, "resolution": e.Resolution, "payload_bytes": len(e.Payload),
	}
	if utf8.Valid(e.Payload) {
		m["payload"] = string(e.Payload)
	} else {
		m["payload_base64"] = e.Payload
	}
	return m
}

func printEntries(w io.Writer, entries []deadletter.Entry, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, e := range entries {
			m := entryJSON(e)
			delete(m, "payload")
			delete(m, "payload_base64")
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "EVENT_ID\tAGGREGATE\tVERSION\tEVENT_TYPE\tSTATUS\tATTEMPTS\tLAST_FAILED\tREASON")
	for _, e := range entries {
		v := "-"
		if e.AggregateVersion != nil {
			v = fmt.Sprint(*e.AggregateVersion)
		}
		reason := e.Reason
		if len(reason) > 80 {
			reason = reason[:77] + "..."
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.EventID, e.Aggregate, v, e.EventType, e.Status,
			e.Attempts, e.LastFailedAt.Format("2006-01-02 15:04:05"), reason)
	}
	return tw.Flush()
}
