package replay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Mark is the outbox_replay header value of replayed records.
const Mark = "replay"

// Config is one replay.
type Config struct {
	// Table is the outbox table; Slot names the checkpoint history that
	// maps Range to its rows.
	Table migrations.Table
	Slot  string
	Range Range
	// AggregateID, AggregateType and EventType, when set, must match.
	AggregateID, AggregateType, EventType string
	// DryRun counts the events and lists the first List, publishing
	// nothing.
	DryRun bool
	List   int
}

// Publisher publishes the events (publisher.Publisher).
type Publisher interface {
	backfill.Publisher
	Close() error
}

// Deps are a replay's connections and outputs.
type Deps struct {
	Pool *pgxpool.Pool
	// Identify returns the server's identity (IDENTIFY_SYSTEM); it is not
	// called for Range.All.
	Identify func(context.Context) (checkpoint.Identity, error)
	// NewPublisher builds the publisher, of the one Kafka configuration;
	// it is not called for a dry run.
	NewPublisher func() Publisher
	// Out receives the report: what is replayed, and the outcome.
	Out io.Writer
	// Progress, if set, is called every few seconds while publishing.
	Progress func(backfill.Stats)
}

// Run replays the events cfg selects, or lists them for a dry run. An
// error after publishing began says how many were published: they stay
// published, and a new replay re-sends them.
func Run(ctx context.Context, cfg Config, d Deps) error {
	schema, err := migrations.Validate(ctx, d.Pool, cfg.Table)
	if err != nil {
		return err
	}
	store := checkpoint.NewStore(d.Pool, cfg.Table, cfg.Slot)
	if err := store.Check(ctx); err != nil {
		return err
	}
	commitTS, err := backfill.CommitTimestamps(ctx, d.Pool)
	if err != nil {
		return err
	}
	m := mapper{history: store, identify: d.Identify, slot: cfg.Slot, commitTS: commitTS}
	w, desc, err := m.selection(ctx, cfg.Range)
	if err != nil {
		return err
	}
	w.AggregateID, w.AggregateType, w.EventType = cfg.AggregateID, cfg.AggregateType, cfg.EventType
	w.SkipQuarantined = true
	src := &backfill.Source{Table: cfg.Table, Schema: schema, CommitTS: commitTS, Mark: Mark}

	// One snapshot for counting and reading: the count is what is published.
	tx, err := d.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
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
	writeHeader(d.Out, cfg.Table, desc, total, quarantined, src)
	if cfg.DryRun {
		return list(ctx, d.Out, src, tx, w, cfg.List)
	}
	pub := d.NewPublisher()
	defer pub.Close()
	r := &backfill.Runner{Source: src, Pub: pub, Progress: d.Progress}
	st, err := r.Run(ctx, tx, w, total)
	if err != nil {
		return fmt.Errorf("replay stopped after %d of %d events: %w (events already published stay published; a new replay re-sends them)", st.Acked, total, err)
	}
	fmt.Fprintf(d.Out, "replayed %d events in %s (%.0f/s)\n", st.Acked, st.Elapsed.Round(time.Millisecond), st.Rate())
	return nil
}

// writeHeader says what is replayed, in which order and how it is marked.
func writeHeader(out io.Writer, table migrations.Table, desc string, total, quarantined int64, src *backfill.Source) {
	order := "per aggregate by aggregate_version (track_commit_timestamp is off)"
	if src.CommitTS {
		order = "by commit timestamp"
	}
	fmt.Fprintf(out, "replay %s: %s\n", table, desc)
	fmt.Fprintf(out, "  %d events, ordered %s; header %s=%s", total, order, backfill.HeaderReplay, src.Mark)
	if quarantined > 0 {
		fmt.Fprintf(out, "; %d quarantined aggregates left out", quarantined)
	}
	fmt.Fprintln(out)
}

// errStopScan ends a dry run's listing.
var errStopScan = errors.New("stop scan")

// list prints the first n events of w, for a dry run.
func list(ctx context.Context, out io.Writer, src *backfill.Source, db backfill.DB, w backfill.Selection, n int) error {
	listed := 0
	err := src.Scan(ctx, db, w, func(ev *replication.WALEvent) error {
		if listed >= n {
			return errStopScan
		}
		listed++
		fmt.Fprintf(out, "  %s\t%s/%s\tv%s\t%s\t%s\n", ev.EventID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion,
			ev.EventType, ev.CommitTime.Format(time.RFC3339Nano))
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return err
	}
	fmt.Fprintln(out, "dry run: nothing published")
	return nil
}
