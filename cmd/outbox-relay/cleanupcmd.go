package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/cleanup"
)

const cleanupSummary = `Deletes outbox rows the relay has confirmed: created before now() - --older-than, committed
before the newest checkpoint's fence (so Kafka acknowledged them), without an open dead-letter row
and not of a quarantined aggregate. Small batches (--batch-size rows, each its own transaction) with
--pause between them, so there is no long lock and no WAL burst; safe beside a running relay.
A partitioned outbox (range on created_at) has its old partitions detached and dropped instead.
Refused without a checkpoint, or with one of another system identifier or timeline.
Checkpoints older than the cutoff are pruned (a replay from them would miss deleted rows).`

// cleanupFlags are cleanup's own flags.
type cleanupFlags struct {
	opts cleanup.Options
}

func (f *cleanupFlags) bind(b *flagBinder) {
	b.dur(&f.opts.OlderThan, "older-than", 0, "delete only rows created longer ago than this (required), e.g. 168h")
	b.int(&f.opts.BatchSize, "batch-size", cleanup.DefaultBatchSize, fmt.Sprintf("rows per DELETE transaction (1..%d)", cleanup.MaxBatchSize))
	b.dur(&f.opts.Pause, "pause", cleanup.DefaultPause, "pause between batches")
	b.dur(&f.opts.MaxDuration, "max-duration", 0, "stop after this long (0: until done); the next run continues")
	b.bool(&f.opts.DryRun, "dry-run", false, "count what would be deleted, delete nothing")
}

func cmdCleanup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f cleanupFlags
	var binder *flagBinder
	cfg, rest, err := parseWith("cleanup", "", cleanupSummary, args, scopeDB, stderr, func(fs *flag.FlagSet) {
		binder = &flagBinder{fs: fs}
		f.bind(binder)
	})
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("%w: unexpected arguments %v", errUsage, rest)
	}
	if err := errors.Join(append(binder.errs, f.opts.Validate())...); err != nil {
		return configError{err}
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	id, err := identify(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	c := &cleanup.Cleaner{DB: pool, Table: cfg.table, Slot: cfg.Slot, Identity: id, Options: f.opts, Log: newLogger(cfg, stderr)}
	res, err := c.Run(ctx)
	if err != nil {
		return err
	}
	writeCleanupReport(stdout, cfg.table.String(), f.opts, res)
	return nil
}

// writeCleanupReport prints a run's outcome; the "deleted N rows in B
// batches" line is stable (tests and scripts read it).
func writeCleanupReport(w io.Writer, table string, o cleanup.Options, res cleanup.Result) {
	fmt.Fprintf(w, "cleanup %s: rows created before %s and below xid %d (%s)\n", table,
		res.Cutoff.UTC().Format(time.RFC3339), res.Xid, res.LimitedBy)
	if o.DryRun {
		fmt.Fprintf(w, "dry run: %d rows older than the cutoff; %d confirmed by a checkpoint; %d would be deleted; %d kept (not yet confirmed, dead-lettered or quarantined)\n",
			res.Old, res.Confirmed, res.Eligible, res.KeptOld())
		for _, d := range res.Dropped {
			fmt.Fprintf(w, "  would drop partition %s (%d rows)\n", d.Partition, d.Rows)
		}
		fmt.Fprintln(w, "dry run: nothing deleted")
		return
	}
	for _, d := range res.Dropped {
		fmt.Fprintf(w, "  dropped partition %s (%d rows)\n", d.Partition, d.Rows)
	}
	for _, k := range res.Kept {
		fmt.Fprintf(w, "  kept partition %s\n", k)
	}
	if res.PrunedCheckpoints > 0 {
		fmt.Fprintf(w, "  pruned %d checkpoints older than the cutoff\n", res.PrunedCheckpoints)
	}
	fmt.Fprintf(w, "deleted %d rows in %d batches, dropped %d partitions, in %s; WAL written meanwhile %d bytes\n",
		res.Deleted, res.Batches, len(res.Dropped), res.Elapsed.Round(time.Millisecond), res.WALBytes)
	if res.Stopped != "" {
		fmt.Fprintf(w, "stopped early (%s): run again to continue\n", res.Stopped)
	}
}
