// Command orders is a demo producer for outbox-relay. It simulates an
// order service: each worker creates pending orders and confirms them, and
// every confirmation writes an "order.confirmed" event to the outbox in the
// same transaction as the status change. A viewer writes low-priority
// "order.viewed" events beside them, which back-pressure may refuse.
//
// The confirm step shows the pattern that makes outbox events trustworthy,
// through outbox.Writer.Transition: the UPDATE is conditional (status =
// 'pending') and the event is appended only when it changed a row, with
// the aggregate version the UPDATE returned. A repeated confirmation
// therefore writes no second event (it counts a conflict), and consumers
// can rely on aggregate_version increasing by one per change.
//
// The views show back-pressure (outbox.WithBackpressure): with a budget
// set, e.g. --backpressure-max-retained-wal 64MiB, a health monitor reads
// the relay's slot every --backpressure-interval; once the slot retains
// more WAL than that (the relay is down, say), Append refuses the views
// with outbox.ErrBackpressure while confirmations, critical events, go on.
// The progress lines and the final line count the refused views.
//
// Each confirmation runs in a (simulated) traced request: the outbox.Writer
// writes its W3C trace context into the event's traceparent header, which
// the relay and examples/shipping continue (docs/tracing.md).
//
// With --record-format avro, for a relay that runs with --record-format
// avro (docs/schemas.md), the example first registers the Avro schema of
// order.confirmed through the registry's Confluent API (subject
// <topic>-value, version 1, the events' schema_version), and its Writer
// checks every event against it before the INSERT (outboxschema,
// outbox.WithEventCheck). With --bad-order it then confirms one order
// with amount_cents as a string: the check refuses it with an
// *outboxschema.SchemaError naming the field, and the transaction rolls
// back before commit. order.viewed events are off in this mode: they would
// share the topic, and so the subject, with order.confirmed.
//
// Usage:
//
//	go run ./examples/orders --duration 5s --workers 4 --rate 50
//	go run ./examples/orders --duration 1m --view-rate 50 --progress 1s --backpressure-max-retained-wal 64MiB --backpressure-interval 1s
//	go run ./examples/orders --record-format avro --schema-registry-url http://127.0.0.1:19081/apis/ccompat/v7 --bad-order
//
// The outbox table must exist ("outbox-relay migrate"); the orders table is
// created if missing, in the outbox table's schema.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	databaseURL string
	table       migrations.Table
	duration    time.Duration
	workers     int
	rate        float64
	viewRate    float64
	progress    time.Duration
	bp          backpressureConfig
	// recordFormat is the relay's record format the events are written
	// for: native (the default: no schema) or avro (registered, checked).
	recordFormat  record.Format
	registryURL   string
	topicTemplate string
	badOrder      bool
}

// backpressureConfig are the --backpressure-* flags. Back-pressure is on
// when any budget is set.
type backpressureConfig struct {
	slot           string
	interval       time.Duration
	maxRetainedWAL int64
	minForecast    time.Duration
	maxOldestEvent time.Duration
	diskBudget     int64
}

// envOr is the environment variable name, or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func (b backpressureConfig) enabled() bool {
	return b.maxRetainedWAL > 0 || b.minForecast > 0 || b.maxOldestEvent > 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg   config
		table string
	)
	slot := os.Getenv("OUTBOX_RELAY_SLOT")
	if slot == "" {
		slot = "outbox_relay"
	}
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("OUTBOX_RELAY_DATABASE_URL"),
		"PostgreSQL URL (env OUTBOX_RELAY_DATABASE_URL)")
	fs.StringVar(&table, "table", "public.outbox", "outbox table, [schema.]name")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to produce orders")
	fs.IntVar(&cfg.workers, "workers", 4, "concurrent workers, each with its own transactions")
	fs.Float64Var(&cfg.rate, "rate", 50, "orders per second per worker (0 = as fast as possible)")
	fs.Float64Var(&cfg.viewRate, "view-rate", 20, "order.viewed events per second in all (low priority: back-pressure may refuse them); 0 = none")
	fs.DurationVar(&cfg.progress, "progress", 5*time.Second, "interval of the progress lines (0 = none)")
	fs.StringVar(&cfg.bp.slot, "backpressure-slot", slot, "the relay's replication slot, read by the health monitor (env OUTBOX_RELAY_SLOT)")
	fs.DurationVar(&cfg.bp.interval, "backpressure-interval", 5*time.Second, "how often the health monitor reads the slot")
	fs.Var(sizeFlag{&cfg.bp.maxRetainedWAL}, "backpressure-max-retained-wal",
		"soft budget: refuse order.viewed once the slot retains more WAL than this, e.g. 64MiB (0 = not checked)")
	fs.DurationVar(&cfg.bp.minForecast, "backpressure-min-forecast", 0,
		"soft budget: refuse order.viewed once the WAL exhaustion forecast is below this, e.g. 2h (0 = not checked)")
	fs.DurationVar(&cfg.bp.maxOldestEvent, "backpressure-max-oldest-event", 0,
		"soft budget: refuse order.viewed once the oldest unacknowledged event is older, e.g. 10m (0 = not checked)")
	fs.Var(sizeFlag{&cfg.bp.diskBudget}, "backpressure-disk-budget", "disk the forecast aims at, like the relay's --wal-disk-budget (0 = safe_wal_size only)")
	format := fs.String("record-format", string(record.FormatNative),
		"the relay's record format: native, or avro (register the order.confirmed schema and check every event against it before commit)")
	fs.StringVar(&cfg.registryURL, "schema-registry-url", os.Getenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL"),
		"the relay's schema registry, its Confluent-compatible API, with --record-format avro (env OUTBOX_RELAY_SCHEMA_REGISTRY_URL)")
	fs.StringVar(&cfg.topicTemplate, "topic-template", envOr("OUTBOX_RELAY_TOPIC_TEMPLATE", publisher.DefaultTopicTemplate),
		"the relay's topic template: it names the subject, <topic>-value (env OUTBOX_RELAY_TOPIC_TEMPLATE)")
	fs.BoolVar(&cfg.badOrder, "bad-order", false,
		"with --record-format avro, confirm one more order with amount_cents as a string at the end: the schema check refuses it before commit")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	switch f := record.Format(*format); f {
	case record.FormatNative, record.FormatAvro:
		cfg.recordFormat = f
	default:
		return config{}, fmt.Errorf("--record-format %q: use native or avro", *format)
	}
	if cfg.recordFormat == record.FormatAvro {
		if cfg.registryURL == "" {
			return config{}, errors.New("--schema-registry-url (or OUTBOX_RELAY_SCHEMA_REGISTRY_URL) is required with --record-format avro")
		}
		viewRateSet := false
		fs.Visit(func(f *flag.Flag) { viewRateSet = viewRateSet || f.Name == "view-rate" })
		if viewRateSet && cfg.viewRate > 0 {
			return config{}, errors.New("--view-rate must be 0 with --record-format avro: order.viewed would share the topic, " +
				"and so the subject, with order.confirmed's schema")
		}
		cfg.viewRate = 0
	} else if cfg.badOrder {
		return config{}, errors.New("--bad-order needs --record-format avro: without a schema there is nothing to refuse it")
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if cfg.databaseURL == "" {
		return config{}, errors.New("--database-url (or OUTBOX_RELAY_DATABASE_URL) is required")
	}
	t, err := migrations.ParseTable(table)
	if err != nil {
		return config{}, fmt.Errorf("--table: %w", err)
	}
	cfg.table = t
	if cfg.duration <= 0 {
		return config{}, fmt.Errorf("--duration must be positive, got %s", cfg.duration)
	}
	if cfg.workers < 1 {
		return config{}, fmt.Errorf("--workers must be at least 1, got %d", cfg.workers)
	}
	if cfg.rate < 0 {
		return config{}, fmt.Errorf("--rate must not be negative, got %g", cfg.rate)
	}
	if cfg.viewRate < 0 {
		return config{}, fmt.Errorf("--view-rate must not be negative, got %g", cfg.viewRate)
	}
	if cfg.progress < 0 {
		return config{}, fmt.Errorf("--progress must not be negative, got %s", cfg.progress)
	}
	for name, d := range map[string]time.Duration{
		"--backpressure-min-forecast": cfg.bp.minForecast, "--backpressure-max-oldest-event": cfg.bp.maxOldestEvent,
	} {
		if d < 0 {
			return config{}, fmt.Errorf("%s must not be negative, got %s", name, d)
		}
	}
	if cfg.bp.interval <= 0 {
		return config{}, fmt.Errorf("--backpressure-interval must be positive, got %s", cfg.bp.interval)
	}
	if cfg.bp.enabled() && cfg.bp.slot == "" {
		return config{}, errors.New("--backpressure-slot is required with a back-pressure budget")
	}
	return cfg, nil
}

// sizeFlag is a byte count flag: 1048576, 512KiB, 64MiB, 2GiB, 10MB, 1GB.
type sizeFlag struct{ p *int64 }

func (f sizeFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.FormatInt(*f.p, 10)
}

func (f sizeFlag) Set(s string) error {
	units := []struct {
		suffix string
		mult   int64
	}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"b", 1}}
	num, mult := strings.ToLower(strings.TrimSpace(s)), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return fmt.Errorf("not a size: use a byte count or e.g. 512KiB, 64MiB, 2GiB")
	}
	*f.p = n * mult
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "orders:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop) // a second signal kills at once
	if err := produce(ctx, cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "orders:", err)
		return 1
	}
	return 0
}

// stats are updated by all workers.
type stats struct {
	created      atomic.Int64
	confirmed    atomic.Int64
	events       atomic.Int64
	views        atomic.Int64
	viewsRefused atomic.Int64
}

// counters is the example's outbox.Metrics: plain counts for its own
// output. A service would pass outboxprom.New(registry) instead, for
// outbox_producer_transition_conflicts_total and the back-pressure series.
type counters struct {
	conflicts atomic.Int64
	refused   atomic.Int64
	engaged   atomic.Bool // soft back-pressure
}

func (c *counters) TransitionConflict(string, string)  { c.conflicts.Add(1) }
func (c *counters) BackpressureRefused(string, string) { c.refused.Add(1) }
func (c *counters) BackpressureEngaged(level string, engaged bool) {
	if level == outbox.BackpressureSoft {
		c.engaged.Store(engaged)
	}
}

// produce runs the shop until cfg.duration passes or ctx ends (a signal):
// either way it stops starting new orders, lets the ones in flight finish,
// checks the outbox and prints the final line.
func produce(ctx context.Context, cfg config, stdout io.Writer) error {
	// workCtx carries the database work, so that a signal never aborts a
	// transaction half way; produceCtx below decides when to stop.
	workCtx, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	pool, err := pgxpool.New(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()

	// Validate first: a missing table gets the "run outbox-relay migrate"
	// hint, and the Writer adapts to a bytea payload or missing headers.
	schema, err := migrations.Validate(ctx, pool, cfg.table)
	if err != nil {
		return err
	}
	metrics := &counters{}
	opts := []outbox.Option{outbox.WithSchema(schema), outbox.WithMetrics(metrics), outbox.WithPropagator(propagation.TraceContext{})}
	if cfg.recordFormat == record.FormatAvro {
		check, err := avroSetup(ctx, cfg, stdout)
		if err != nil {
			return err
		}
		opts = append(opts, outbox.WithEventCheck(check))
	}
	var monitor *outbox.HealthMonitor
	if cfg.bp.enabled() {
		monitor, err = outbox.NewHealthMonitor(pool, outbox.HealthConfig{
			Slot:     cfg.bp.slot,
			Table:    cfg.table,
			Interval: cfg.bp.interval,
			Soft: outbox.Budget{
				MinForecast:    cfg.bp.minForecast,
				MaxRetainedWAL: cfg.bp.maxRetainedWAL,
				MaxOldestEvent: cfg.bp.maxOldestEvent,
			},
			DiskBudget: cfg.bp.diskBudget,
		}, outbox.WithLogger(slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{ReplaceAttr: dropTime}))), outbox.WithMetrics(metrics))
		if err != nil {
			return fmt.Errorf("back-pressure: %w", err)
		}
		// The first reading, before any event: a budget crossed already
		// refuses from the start.
		if err := monitor.Refresh(ctx); err != nil {
			return fmt.Errorf("back-pressure: first health reading: %w", err)
		}
		// The monitor stops after the last event is written.
		go monitor.Run(workCtx)
		opts = append(opts, outbox.WithBackpressure(monitor))
	}
	s := &shop{
		pool:   pool,
		outbox: cfg.table,
		orders: migrations.Table{Schema: cfg.table.Schema, Name: "orders"},
		writer: outbox.NewWriter(cfg.table, opts...),
		runID:  fmt.Sprintf("%08x", rand.Uint32()),
	}
	if err := s.createTable(ctx); err != nil {
		return err
	}
	rate := "unlimited"
	if cfg.rate > 0 {
		rate = fmt.Sprintf("%g", cfg.rate)
	}
	fmt.Fprintf(stdout, "orders: %d workers x %s orders/s for %s into %s (events into %s, payload %s)\n",
		cfg.workers, rate, cfg.duration, s.orders, cfg.table, schema.PayloadType)
	if cfg.recordFormat == record.FormatAvro {
		fmt.Fprintln(stdout, "orders: every order.confirmed is checked against its Avro schema before its INSERT (outboxschema)")
	}
	if cfg.viewRate > 0 {
		bp := "off"
		if monitor != nil {
			bp = fmt.Sprintf("slot %s, soft budget %s, read every %s", cfg.bp.slot, budgetString(cfg.bp), cfg.bp.interval)
		}
		fmt.Fprintf(stdout, "orders: %g order.viewed events/s, low priority; back-pressure: %s\n", cfg.viewRate, bp)
	}

	// produceCtx only decides when to stop starting new orders; each order
	// runs on workCtx so the ones in flight at the deadline still finish.
	produceCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	var (
		st        stats
		wg        sync.WaitGroup
		errOnce   sync.Once
		firstErr  error
		lastOrder atomic.Pointer[order] // a confirmed order, for the duplicate demo
	)
	fail := func(err error) { errOnce.Do(func() { firstErr = err; cancel() }) }
	began := time.Now()
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.worker(produceCtx, workCtx, w, cfg.rate, &st, &lastOrder); err != nil {
				fail(err)
			}
		}()
	}
	if cfg.viewRate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.viewer(produceCtx, workCtx, cfg.viewRate, &st); err != nil {
				fail(err)
			}
		}()
	}
	progressDone := make(chan struct{})
	if cfg.progress > 0 {
		go func() {
			defer close(progressDone)
			t := time.NewTicker(cfg.progress)
			defer t.Stop()
			for {
				select {
				case <-produceCtx.Done():
					return
				case <-t.C:
					fmt.Fprintln(stdout, progressLine(time.Since(began), &st, metrics, monitor))
				}
			}
		}()
	} else {
		close(progressDone)
	}
	wg.Wait()
	cancel()
	<-progressDone
	elapsed := time.Since(began)
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintln(stdout, "orders: interrupted: the orders in flight finished, no new ones started")
	}
	ctx = workCtx

	// Confirming an already confirmed order must change nothing and write
	// no event; Transition counts the conflict.
	if o := lastOrder.Load(); o != nil {
		before := metrics.conflicts.Load()
		again, err := s.confirm(ctx, *o)
		if err != nil {
			return fmt.Errorf("second confirm of %s: %w", o.id, err)
		}
		if again {
			return fmt.Errorf("second confirm of %s updated the order and wrote an event", o.id)
		}
		if metrics.conflicts.Load() != before+1 {
			return fmt.Errorf("second confirm of %s: no conflict counted", o.id)
		}
		fmt.Fprintf(stdout, "orders: confirming order %s again: no row updated, no event written, conflict counted\n", o.id)
	}
	if cfg.badOrder {
		if err := s.badOrder(ctx, stdout); err != nil {
			return err
		}
	}

	var stored, storedViews int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE event_type = 'order.confirmed'), count(*) FILTER (WHERE event_type = 'order.viewed')
		FROM `+cfg.table.Quoted()+` WHERE aggregate_type = 'order' AND aggregate_id LIKE $1`,
		s.idPrefix()+"%").Scan(&stored, &storedViews); err != nil {
		return fmt.Errorf("count stored events: %w", err)
	}

	// The first part is the format of earlier versions; the views follow.
	fmt.Fprintf(stdout, "orders: run %s: orders created %d, orders confirmed %d, events written %d (%.0f events/s); events in %s for this run %d; "+
		"views written %d, views refused %d (back-pressure)\n",
		s.runID, st.created.Load(), st.confirmed.Load(), st.events.Load(),
		float64(st.events.Load())/elapsed.Seconds(), cfg.table, stored, st.views.Load(), st.viewsRefused.Load())
	if stored != st.events.Load() {
		return fmt.Errorf("outbox holds %d events for this run, but %d were written", stored, st.events.Load())
	}
	if storedViews != st.views.Load() {
		return fmt.Errorf("outbox holds %d order.viewed events for this run, but %d were written", storedViews, st.views.Load())
	}
	return nil
}

// progressLine is one line of progress: counts so far and, with
// back-pressure, the state and the reading it is based on.
func progressLine(elapsed time.Duration, st *stats, m *counters, monitor *outbox.HealthMonitor) string {
	line := fmt.Sprintf("orders: %s: orders created %d, confirmed %d, views written %d, views refused %d",
		elapsed.Round(time.Second), st.created.Load(), st.confirmed.Load(), st.views.Load(), st.viewsRefused.Load())
	if monitor == nil {
		return line
	}
	state := "off"
	if m.engaged.Load() {
		state = "ENGAGED"
	}
	h := monitor.Health()
	forecast := "none"
	if h.Forecast >= 0 {
		forecast = h.Forecast.Round(time.Second).String()
	}
	line += fmt.Sprintf("; back-pressure %s (retained WAL %s, forecast %s", state, mib(h.RetainedWAL), forecast)
	if h.Err != nil {
		line += ", reading failed: " + h.Err.Error()
	}
	return line + ")"
}

func budgetString(b backpressureConfig) string {
	var parts []string
	if b.maxRetainedWAL > 0 {
		parts = append(parts, "retained WAL > "+mib(b.maxRetainedWAL))
	}
	if b.minForecast > 0 {
		parts = append(parts, "forecast < "+b.minForecast.String())
	}
	if b.maxOldestEvent > 0 {
		parts = append(parts, "oldest event > "+b.maxOldestEvent.String())
	}
	return strings.Join(parts, " or ")
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// dropTime leaves the time out of the monitor's log lines, which sit
// between the progress lines.
func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// shop is the tiny order service: the orders table plus its outbox.
type shop struct {
	pool   *pgxpool.Pool
	outbox migrations.Table
	orders migrations.Table
	writer *outbox.Writer
	// runID is part of every order id so this run's events can be counted
	// in the outbox even while other runs write to it.
	runID string
	seq   atomic.Int64
}

func (s *shop) createTable(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.orders.Quoted()+` (
	id           text PRIMARY KEY,
	customer_id  text NOT NULL,
	amount_cents bigint NOT NULL,
	currency     text NOT NULL,
	status       text NOT NULL,
	version      bigint NOT NULL,
	created_at   timestamptz NOT NULL DEFAULT now(),
	updated_at   timestamptz NOT NULL DEFAULT now()
)`)
	if err != nil {
		return fmt.Errorf("create %s: %w", s.orders, err)
	}
	return nil
}

// worker creates and confirms orders until produceCtx ends. Database work
// uses workCtx so that stopping at the deadline never aborts a transaction
// half way.
func (s *shop) worker(produceCtx, workCtx context.Context, n int, rate float64, st *stats, lastOrder *atomic.Pointer[order]) error {
	var tick <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		tick = t.C
	}
	for {
		if tick != nil {
			select {
			case <-produceCtx.Done():
				return nil
			case <-tick:
			}
		} else if produceCtx.Err() != nil {
			return nil
		}
		o, err := s.create(workCtx)
		if err != nil {
			return fmt.Errorf("worker %d: %w", n, err)
		}
		st.created.Add(1)
		ok, err := s.confirm(workCtx, o)
		if err != nil {
			return fmt.Errorf("worker %d: %w", n, err)
		}
		if ok {
			st.confirmed.Add(1)
			st.events.Add(1)
			lastOrder.Store(&o)
		}
	}
}

// viewer writes order.viewed events for random orders of this run at rate
// per second until produceCtx ends. A refused view (back-pressure) is
// counted and dropped: the page was still shown, only its analytics event
// is lost, which is what PriorityLow is for.
func (s *shop) viewer(produceCtx, workCtx context.Context, rate float64, st *stats) error {
	t := time.NewTicker(max(time.Duration(float64(time.Second)/rate), time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-produceCtx.Done():
			return nil
		case <-t.C:
		}
		n := s.seq.Load()
		if n == 0 {
			continue
		}
		ok, err := s.view(workCtx, fmt.Sprintf("%s%06d", s.idPrefix(), 1+rand.Int64N(n)))
		switch {
		case errors.Is(err, outbox.ErrBackpressure):
			st.viewsRefused.Add(1)
		case err != nil:
			return fmt.Errorf("viewer: %w", err)
		case ok:
			st.views.Add(1)
		}
	}
}

// view appends an order.viewed event, low priority, for order id. A view
// changes nothing, so it takes no lock: the event carries the version the
// reader saw, which may be older than a change committed meanwhile. It
// reports false when the order does not exist (yet).
func (s *shop) view(ctx context.Context, id string) (written bool, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if !written {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	var version int64
	err = tx.QueryRow(ctx, `SELECT version FROM `+s.orders.Quoted()+` WHERE id = $1`, id).Scan(&version)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // picked an order whose insert is still in flight
	}
	if err != nil {
		return false, fmt.Errorf("read order %s: %w", id, err)
	}
	payload, err := json.Marshal(orderViewed{OrderID: id, ViewedAt: time.Now().UTC()})
	if err != nil {
		return false, fmt.Errorf("encode payload: %w", err)
	}
	err = s.writer.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
		AggregateType:    "order",
		AggregateID:      id,
		AggregateVersion: version,
		EventType:        "order.viewed",
		SchemaVersion:    1,
		Payload:          payload,
		Headers:          map[string]string{"source": "examples/orders"},
		Priority:         outbox.PriorityLow, // refused, not written, under back-pressure
	})
	if err != nil {
		return false, err // errors.Is(err, outbox.ErrBackpressure) when refused
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit view of %s: %w", id, err)
	}
	return true, nil
}

// order is what create wrote, enough to describe the order in its events.
type order struct {
	id          string
	customerID  string
	amountCents int64
	currency    string
}

// create inserts a pending order at version 1. (A real service would emit
// an order.created event here too; the demo keeps to one event type.)
func (s *shop) create(ctx context.Context) (order, error) {
	o := order{
		id:          fmt.Sprintf("%s%06d", s.idPrefix(), s.seq.Add(1)),
		customerID:  fmt.Sprintf("cust-%04d", rand.IntN(10000)),
		amountCents: 500 + rand.Int64N(50000),
		currency:    "EUR",
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.orders.Quoted()+`
	(id, customer_id, amount_cents, currency, status, version) VALUES ($1, $2, $3, $4, 'pending', 1)`,
		o.id, o.customerID, o.amountCents, o.currency)
	if err != nil {
		return order{}, fmt.Errorf("insert order %s: %w", o.id, err)
	}
	return o, nil
}

// idPrefix is the common prefix of this run's order ids.
func (s *shop) idPrefix() string { return "ord-" + s.runID + "-" }

// errNotPending is the confirm step's own conflict error: Transition
// returns it when the order was not pending (already confirmed, here).
var errNotPending = errors.New("order is not pending")

// confirm moves a pending order to confirmed and, in the same transaction,
// appends the order.confirmed event, through outbox.Writer.Transition: the
// UPDATE is conditional on status = 'pending', and the event is appended
// only if it changed the row, with the version it returned. It reports
// whether the order changed; an order that is not pending (already
// confirmed) yields no event and counts a conflict.
func (s *shop) confirm(ctx context.Context, o order) (confirmed bool, err error) {
	return s.confirmWith(ctx, o, nil)
}

// confirmWith is confirm with the payload, as JSON members, changed by
// spoil first (nil: as built): how badOrder makes a payload that does
// not match its schema.
func (s *shop) confirmWith(ctx context.Context, o order, spoil func(map[string]any)) (confirmed bool, err error) {
	ctx = requestContext(ctx)
	// The payload is built before the change: Transition appends it as
	// given. The new version is in the record's aggregate_version header.
	payload, err := json.Marshal(orderConfirmed{
		OrderID:     o.id,
		CustomerID:  o.customerID,
		Status:      "confirmed",
		AmountCents: o.amountCents,
		Currency:    o.currency,
		Items:       []item{{SKU: "sku-1042", Quantity: 1}, {SKU: "sku-2210", Quantity: 2}},
		ConfirmedAt: time.Now().UTC(),
	})
	if err != nil {
		return false, fmt.Errorf("encode payload: %w", err)
	}
	if spoil != nil {
		var members map[string]any
		if err := json.Unmarshal(payload, &members); err != nil {
			return false, fmt.Errorf("spoil payload: %w", err)
		}
		spoil(members)
		if payload, err = json.Marshal(members); err != nil {
			return false, fmt.Errorf("spoil payload: %w", err)
		}
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil || !confirmed {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	err = s.writer.Transition(ctx, outbox.PgxTx(tx), outbox.Transition{
		SQL: `UPDATE ` + s.orders.Quoted() + `
	SET status = 'confirmed', version = version + 1, updated_at = now()
	WHERE id = $1 AND status = 'pending'
	RETURNING version`,
		Args: []any{o.id},
		Event: &outbox.Event{
			AggregateType: "order",
			AggregateID:   o.id,
			EventType:     "order.confirmed",
			SchemaVersion: orderConfirmedVersion,
			Payload:       payload, // JSON is also fine as bytea
			// The Writer adds traceparent from ctx (docs/tracing.md).
			Headers: map[string]string{"source": "examples/orders"},
		},
		Invalid: errNotPending,
	})
	if errors.Is(err, errNotPending) {
		// Not pending: nothing changed, so there is nothing to announce.
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("confirm order %s: %w", o.id, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit confirm of %s: %w", o.id, err)
	}
	return true, nil
}

// orderConfirmed is the event payload, version 1 (about 200 bytes). The
// order's version is not in it: it is the record's aggregate_version
// header, set from the confirm step's RETURNING.
type orderConfirmed struct {
	OrderID     string    `json:"order_id"`
	CustomerID  string    `json:"customer_id"`
	Status      string    `json:"status"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Items       []item    `json:"items"`
	ConfirmedAt time.Time `json:"confirmed_at"`
}

// orderViewed is the order.viewed payload, version 1.
type orderViewed struct {
	OrderID  string    `json:"order_id"`
	ViewedAt time.Time `json:"viewed_at"`
}

type item struct {
	SKU      string `json:"sku"`
	Quantity int    `json:"qty"`
}

// requestContext is ctx as a request handler sees it once the HTTP
// server's OpenTelemetry middleware has read the caller's traceparent:
// inside a sampled remote span. The Writer copies that context into the
// event's traceparent header, so the relay's publish span and the
// consumers' spans (examples/shipping) continue the request's trace. A
// real service gets it from its middleware and installs the propagator
// globally (otel.SetTextMapPropagator) instead of WithPropagator.
func requestContext(ctx context.Context) context.Context {
	tid, _ := trace.TraceIDFromHex(newTraceID())
	sid, _ := trace.SpanIDFromHex(newTraceID()[:16])
	return trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
}

// newTraceID returns a W3C-style 16-byte hex trace id.
func newTraceID() string {
	return fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
}
