package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

const replaySummary = `Re-publishes events still in the outbox table, per aggregate in commit order, each with the
header outbox_replay=replay. Safe beside a running relay: it reads the table in one snapshot and
publishes; it never touches the slot or the checkpoints. Aggregates quarantined in the dead-letter
table are left out (outbox-relay dlq retry handles them).

Positions map to rows through the checkpoint history (conservative: a few events before the start
may be included, none inside the window is missed):
  --from-lsn LSN | --from-checkpoint | --since TIME | --all     where to start (one is required)
  --to-lsn LSN                                                 where to stop (default: now)
  --aggregate A [--aggregate-type T] --event-type E            filters
  --dry-run                                                    count and list, publish nothing`

// replayFlags are replay's own flags.
type replayFlags struct {
	fromLSN, toLSN, since       string
	fromCheckpoint, all, dryRun bool
	aggregate, aggType, evType  string
	list                        int
}

func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f replayFlags
	cfg, rest, err := parseWith("replay", "", replaySummary, args, scopeDB|scopeKafka, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&f.fromLSN, "from-lsn", "", "start at this WAL position (e.g. from checkpoint show)")
		fs.StringVar(&f.toLSN, "to-lsn", "", "stop at this WAL position")
		fs.BoolVar(&f.fromCheckpoint, "from-checkpoint", false, "start at the newest saved checkpoint")
		fs.StringVar(&f.since, "since", "", "start at this time (RFC 3339, e.g. 2026-12-02T18:00:00Z)")
		fs.BoolVar(&f.all, "all", false, "every row still in the table")
		fs.StringVar(&f.aggregate, "aggregate", "", "only this aggregate_id")
		fs.StringVar(&f.aggType, "aggregate-type", "", "only this aggregate_type")
		fs.StringVar(&f.evType, "event-type", "", "only this event_type")
		fs.BoolVar(&f.dryRun, "dry-run", false, "count and list the matching events, publish nothing")
		fs.IntVar(&f.list, "list", 20, "with --dry-run, how many events to list")
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, rest)
	}
	starts := 0
	for _, b := range []bool{f.fromLSN != "", f.fromCheckpoint, f.since != "", f.all} {
		if b {
			starts++
		}
	}
	if starts != 1 {
		return configError{errors.New("replay needs exactly one of --from-lsn, --from-checkpoint, --since or --all")}
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	schema, err := migrations.Validate(ctx, pool, cfg.table)
	if err != nil {
		return err
	}
	store := checkpoint.NewStore(pool, cfg.table, cfg.Slot)
	if err := store.Check(ctx); err != nil {
		return err
	}
	commitTS, err := backfill.CommitTimestamps(ctx, pool)
	if err != nil {
		return err
	}
	w, desc, err := replayWindow(ctx, cfg, store, f, commitTS)
	if err != nil {
		return err
	}
	w.AggregateID, w.AggregateType, w.EventType = f.aggregate, f.aggType, f.evType
	w.SkipQuarantined = true
	src := &backfill.Source{Table: cfg.table, Schema: schema, CommitTS: commitTS, Mark: "replay"}
	return runReplay(ctx, pool, cfg, src, w, desc, f, stdout, stderr)
}

// replayWindow maps the start/stop flags to a window through the
// checkpoint history and describes it.
func replayWindow(ctx context.Context, cfg *config, store *checkpoint.Store, f replayFlags, commitTS bool) (backfill.Window, string, error) {
	var w backfill.Window
	if f.all {
		return w, "every row in the table", nil
	}
	id, err := identify(ctx, cfg.DatabaseURL)
	if err != nil {
		return w, "", err
	}
	var desc string
	switch {
	case f.fromCheckpoint:
		cp, err := store.Latest(ctx)
		if err != nil {
			return w, "", err
		}
		if err := cp.Verify(id); err != nil {
			return w, "", err
		}
		if cp.Fence == nil {
			return w, "", fmt.Errorf("checkpoint at %s has no fence yet (saved before the relay captured one): use --all", cp.LSN)
		}
		w.FromXid = &cp.Fence.Xmin
		desc = fmt.Sprintf("from checkpoint %s (xid >= %d, fence at %s)", cp.LSN, cp.Fence.Xmin, cp.Fence.LSN)
	case f.fromLSN != "":
		lsn, err := pglogrepl.ParseLSN(f.fromLSN)
		if err != nil {
			return w, "", configError{fmt.Errorf("--from-lsn %q: %w (use the X/Y form)", f.fromLSN, err)}
		}
		fence, ok, err := store.FenceBefore(ctx, id, lsn)
		if err != nil {
			return w, "", err
		}
		if !ok {
			return w, "", fmt.Errorf("the checkpoint history of slot %q (%s) has no position at or before %s: "+
				"it starts later or was pruned (--checkpoint-retention); use --all to replay every row still in the table", cfg.Slot, id, lsn)
		}
		w.FromXid = &fence.Xmin
		desc = fmt.Sprintf("from LSN %s (xid >= %d, fence at %s)", lsn, fence.Xmin, fence.LSN)
	case f.since != "":
		t, err := time.Parse(time.RFC3339Nano, f.since)
		if err != nil {
			return w, "", configError{fmt.Errorf("--since %q: use RFC 3339, e.g. 2026-12-02T18:00:00Z", f.since)}
		}
		w.Since = t
		fence, ok, err := store.FenceBeforeTime(ctx, id, t)
		if err != nil {
			return w, "", err
		}
		switch {
		case ok:
			w.FromXid = &fence.Xmin
			desc = fmt.Sprintf("since %s (xid >= %d, fence at %s)", t.Format(time.RFC3339), fence.Xmin, fence.At.Format(time.RFC3339))
		case commitTS:
			desc = fmt.Sprintf("since %s (commit timestamps)", t.Format(time.RFC3339))
		default:
			return w, "", fmt.Errorf("the checkpoint history of slot %q has no position before %s and track_commit_timestamp is off, "+
				"so rows committed since cannot be told apart: use --all (or an LSN/time inside the history)", cfg.Slot, t.Format(time.RFC3339))
		}
		if commitTS {
			desc += ", commit_ts >= since"
		}
	}
	if f.toLSN != "" {
		lsn, err := pglogrepl.ParseLSN(f.toLSN)
		if err != nil {
			return w, "", configError{fmt.Errorf("--to-lsn %q: %w (use the X/Y form)", f.toLSN, err)}
		}
		fence, ok, err := store.FenceAfter(ctx, id, lsn)
		if err != nil {
			return w, "", err
		}
		if ok {
			w.ToXid = &fence.Xmax
			desc += fmt.Sprintf(", to LSN %s (xid < %d, fence at %s)", lsn, fence.Xmax, fence.LSN)
		} else {
			desc += fmt.Sprintf(", to LSN %s (past the checkpoint history: up to now)", lsn)
		}
	}
	return w, desc, nil
}

func runReplay(ctx context.Context, pool *pgxpool.Pool, cfg *config, src *backfill.Source, w backfill.Window, desc string,
	f replayFlags, stdout, stderr io.Writer) error {
	// One snapshot for counting and reading: the count is what is published.
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background())
	total, err := src.Count(ctx, tx, w)
	if err != nil {
		return err
	}
	quarantined, err := src.Quarantined(ctx, tx)
	if err != nil {
		return err
	}
	order := "per aggregate by aggregate_version (track_commit_timestamp is off)"
	if src.CommitTS {
		order = "by commit timestamp"
	}
	fmt.Fprintf(stdout, "replay %s: %s\n", cfg.table, desc)
	fmt.Fprintf(stdout, "  %d events, ordered %s; header %s=%s", total, order, backfill.HeaderReplay, src.Mark)
	if quarantined > 0 {
		fmt.Fprintf(stdout, "; %d quarantined aggregates left out", quarantined)
	}
	fmt.Fprintln(stdout)
	if f.dryRun {
		n := 0
		err := src.Scan(ctx, tx, w, func(ev *replication.Event) error {
			if n >= f.list {
				return errStopScan
			}
			n++
			fmt.Fprintf(stdout, "  %s\t%s/%s\tv%s\t%s\t%s\n", ev.EventID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion,
				ev.EventType, ev.CommitTime.Format(time.RFC3339Nano))
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return err
		}
		fmt.Fprintln(stdout, "dry run: nothing published")
		return nil
	}
	log := newLogger(cfg, stderr)
	pub := publisher.New(publisher.Config{
		Brokers: cfg.brokers, Template: cfg.template, MaxBatch: cfg.MaxBatch, MaxBatchBytes: cfg.MaxBatchBytes, Linger: cfg.Linger,
		BackoffBase: cfg.BackoffBase, BackoffMax: cfg.BackoffMax,
		CreateTopics: cfg.CreateTopics, TopicPartitions: cfg.TopicPartitions, TopicReplicationFactor: cfg.TopicReplication,
		UnknownTopicTimeout: cfg.UnknownTopicWait, Transport: cfg.kafkaTransport("outbox-relay"),
	}, log, nil)
	defer pub.Close()
	r := &backfill.Runner{Source: src, Pub: pub, Progress: progressPrinter(stderr, "replay")}
	st, err := r.Run(ctx, tx, w, total)
	if err != nil {
		return fmt.Errorf("replay stopped after %d of %d events: %w (events already published stay published; a new replay re-sends them)", st.Acked, total, err)
	}
	fmt.Fprintf(stdout, "replayed %d events in %s (%.0f/s)\n", st.Acked, st.Elapsed.Round(time.Millisecond), st.Rate())
	return nil
}

var errStopScan = errors.New("stop scan")

// progressPrinter prints a progress line to w.
func progressPrinter(w io.Writer, what string) func(backfill.Stats) {
	return func(s backfill.Stats) {
		pct := 100.0
		if s.Total > 0 {
			pct = 100 * float64(s.Acked) / float64(s.Total)
		}
		fmt.Fprintf(w, "%s: %d/%d events acknowledged (%.0f%%), %.0f/s, %s\n", what, s.Acked, s.Total, pct, s.Rate(), s.Elapsed.Round(time.Second))
	}
}
