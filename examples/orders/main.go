// Command orders is a demo producer for outbox-relay. It simulates an
// order service: each worker creates pending orders and confirms them, and
// every confirmation writes an "order.confirmed" event to the outbox in the
// same transaction as the status change.
//
// The confirm step shows the pattern that makes outbox events trustworthy:
// the UPDATE is conditional (status = 'pending') and the event is appended
// only when it changed a row, with the aggregate version the UPDATE
// returned. A repeated confirmation therefore writes no second event, and
// consumers can rely on aggregate_version increasing by one per change.
//
// Each confirmation runs in a (simulated) traced request: the outbox.Writer
// writes its W3C trace context into the event's traceparent header, which
// the relay and examples/shipping continue (docs/tracing.md).
//
// Usage:
//
//	go run ./examples/orders --duration 5s --workers 4 --rate 50
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
	"math/rand/v2"
	"os"
	"os/signal"
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
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("orders", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		cfg   config
		table string
	)
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("OUTBOX_RELAY_DATABASE_URL"),
		"PostgreSQL URL (env OUTBOX_RELAY_DATABASE_URL)")
	fs.StringVar(&table, "table", "public.outbox", "outbox table, [schema.]name")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "how long to produce orders")
	fs.IntVar(&cfg.workers, "workers", 4, "concurrent workers, each with its own transactions")
	fs.Float64Var(&cfg.rate, "rate", 50, "orders per second per worker (0 = as fast as possible)")
	if err := fs.Parse(args); err != nil {
		return config{}, err
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
	return cfg, nil
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
	if err := produce(ctx, cfg, stdout); err != nil {
		fmt.Fprintln(stderr, "orders:", err)
		return 1
	}
	return 0
}

// stats are updated by all workers.
type stats struct {
	created   atomic.Int64
	confirmed atomic.Int64
	events    atomic.Int64
}

func produce(ctx context.Context, cfg config, stdout io.Writer) error {
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
	s := &shop{
		pool:   pool,
		orders: migrations.Table{Schema: cfg.table.Schema, Name: "orders"},
		writer: outbox.NewWriter(cfg.table, outbox.WithSchema(schema), outbox.WithPropagator(propagation.TraceContext{})),
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

	// produceCtx only decides when to stop starting new orders; each order
	// runs on ctx so the ones in flight at the deadline still finish.
	produceCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()

	var (
		st       stats
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		lastID   atomic.Value // string: a confirmed order, for the duplicate demo
	)
	began := time.Now()
	for w := range cfg.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := s.worker(produceCtx, ctx, w, cfg.rate, &st, &lastID)
			if err != nil {
				errOnce.Do(func() { firstErr = err; cancel() })
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		fmt.Fprintln(stdout, "orders: interrupted")
	}

	// Confirming an already confirmed order must change nothing and write
	// no event.
	if id, ok := lastID.Load().(string); ok && ctx.Err() == nil {
		again, err := s.confirm(ctx, id)
		if err != nil {
			return fmt.Errorf("second confirm of %s: %w", id, err)
		}
		if again {
			return fmt.Errorf("second confirm of %s updated the order and wrote an event", id)
		}
		fmt.Fprintf(stdout, "orders: confirming order %s again: no row updated, no event written\n", id)
	}

	var stored int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+cfg.table.Quoted()+`
		WHERE aggregate_type = 'order' AND event_type = 'order.confirmed' AND aggregate_id LIKE $1`,
		s.idPrefix()+"%").Scan(&stored); err != nil {
		return fmt.Errorf("count stored events: %w", err)
	}

	fmt.Fprintf(stdout, "orders: run %s: orders created %d, orders confirmed %d, events written %d (%.0f events/s); events in %s for this run %d\n",
		s.runID, st.created.Load(), st.confirmed.Load(), st.events.Load(),
		float64(st.events.Load())/elapsed.Seconds(), cfg.table, stored)
	if stored != st.events.Load() {
		return fmt.Errorf("outbox holds %d events for this run, but %d were written", stored, st.events.Load())
	}
	return nil
}

// shop is the tiny order service: the orders table plus its outbox.
type shop struct {
	pool   *pgxpool.Pool
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
func (s *shop) worker(produceCtx, workCtx context.Context, n int, rate float64, st *stats, lastID *atomic.Value) error {
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
		id, err := s.create(workCtx)
		if err != nil {
			return fmt.Errorf("worker %d: %w", n, err)
		}
		st.created.Add(1)
		ok, err := s.confirm(workCtx, id)
		if err != nil {
			return fmt.Errorf("worker %d: %w", n, err)
		}
		if ok {
			st.confirmed.Add(1)
			st.events.Add(1)
			lastID.Store(id)
		}
	}
}

// create inserts a pending order at version 1. (A real service would emit
// an order.created event here too; the demo keeps to one event type.)
func (s *shop) create(ctx context.Context) (string, error) {
	id := fmt.Sprintf("%s%06d", s.idPrefix(), s.seq.Add(1))
	_, err := s.pool.Exec(ctx, `INSERT INTO `+s.orders.Quoted()+`
	(id, customer_id, amount_cents, currency, status, version) VALUES ($1, $2, $3, 'EUR', 'pending', 1)`,
		id, fmt.Sprintf("cust-%04d", rand.IntN(10000)), 500+rand.Int64N(50000))
	if err != nil {
		return "", fmt.Errorf("insert order %s: %w", id, err)
	}
	return id, nil
}

// idPrefix is the common prefix of this run's order ids.
func (s *shop) idPrefix() string { return "ord-" + s.runID + "-" }

// confirm moves a pending order to confirmed and, in the same transaction,
// appends the order.confirmed event. It reports whether the order changed;
// an order that is not pending (already confirmed) yields no event.
func (s *shop) confirm(ctx context.Context, id string) (confirmed bool, err error) {
	ctx = requestContext(ctx)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()

	var (
		version     int64
		customerID  string
		amountCents int64
		currency    string
		confirmedAt time.Time
	)
	err = tx.QueryRow(ctx, `UPDATE `+s.orders.Quoted()+`
	SET status = 'confirmed', version = version + 1, updated_at = now()
	WHERE id = $1 AND status = 'pending'
	RETURNING version, customer_id, amount_cents, currency, updated_at`, id).
		Scan(&version, &customerID, &amountCents, &currency, &confirmedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not pending: nothing changed, so there is nothing to announce.
		return false, tx.Commit(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("confirm order %s: %w", id, err)
	}

	payload, err := json.Marshal(orderConfirmed{
		OrderID:     id,
		CustomerID:  customerID,
		Status:      "confirmed",
		Version:     version,
		AmountCents: amountCents,
		Currency:    currency,
		Items:       []item{{SKU: "sku-1042", Quantity: 1}, {SKU: "sku-2210", Quantity: 2}},
		ConfirmedAt: confirmedAt.UTC(),
	})
	if err != nil {
		return false, fmt.Errorf("encode payload: %w", err)
	}
	err = s.writer.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
		AggregateType:    "order",
		AggregateID:      id,
		AggregateVersion: version,
		EventType:        "order.confirmed",
		SchemaVersion:    1,
		Payload:          payload, // JSON is also fine as bytea
		// The Writer adds traceparent from ctx (docs/tracing.md).
		Headers: map[string]string{"source": "examples/orders"},
	})
	if err != nil {
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("commit confirm of %s: %w", id, err)
	}
	return true, nil
}

// orderConfirmed is the event payload, version 1 (about 200 bytes).
type orderConfirmed struct {
	OrderID     string    `json:"order_id"`
	CustomerID  string    `json:"customer_id"`
	Status      string    `json:"status"`
	Version     int64     `json:"version"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	Items       []item    `json:"items"`
	ConfirmedAt time.Time `json:"confirmed_at"`
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
