// Command shipping is a demo consumer for outbox-relay: a shipping service
// that creates one shipment per confirmed order, reacting to the
// "order.confirmed" events that examples/orders writes to the outbox.
//
// It uses package inbox, so each event's effect is applied once even
// though Kafka delivers at least once: the shipment row, and a counter
// that is incremented per shipment (an effect that is NOT idempotent by
// itself), are written in the same transaction that registers the event
// in processed_events. A redelivery — after a crash between the database
// commit and the offset commit, or a replay under a fresh consumer group —
// is absorbed and counted.
//
// The inbox applies events in batches (one transaction for up to
// --batch-size events, or what arrived within --batch-linger) and works on
// up to --concurrency partitions at a time; 0 keeps the library's default
// for each. --batch-size 1 --concurrency 1 is the one-event-per-transaction
// path of earlier versions. The pool gets at least --concurrency + 2
// connections, so a busy consumer never starves its own bookkeeping.
//
// Usage:
//
//	go run ./examples/shipping --until-idle 5s
//	go run ./examples/shipping --group shipping-replay --until-idle 5s   # forced redelivery: all duplicates
//	go run ./examples/shipping --batch-size 200 --batch-linger 10ms --concurrency 6 --until-idle 5s
//	go run ./examples/shipping --batch-size 1 --concurrency 1 --until-idle 5s   # one transaction per event
//
// Tracing: the handler runs inside a span that continues the trace of the
// request that confirmed the order (the traceparent header examples/orders
// writes), so spans started from its ctx hang under it. This demo installs
// only the W3C propagator; a real service also installs an OpenTelemetry
// SDK TracerProvider (otel.SetTracerProvider), whose spans it exports
// (docs/tracing.md).
//
// The database (SHIPPING_DATABASE_URL, else OUTBOX_RELAY_DATABASE_URL) gets
// the schema "shipping" with the inbox tables, shipments and counters.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"github.com/segmentio/kafka-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxprom"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	databaseURL    string
	brokers        []string
	topics         []string
	consumer       string
	group          string
	schema         string
	policy         poison.Policy
	commitInterval time.Duration
	sessionTimeout time.Duration
	untilIdle      time.Duration
	batchSize      int
	batchLinger    time.Duration
	concurrency    int
	duration       time.Duration
	metricsAddr    string
	logLevel       zerolog.Level
}

func envOr(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("shipping", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var brokers, topics, policy, level string
	fs.StringVar(&cfg.databaseURL, "database-url", envOr("SHIPPING_DATABASE_URL", "OUTBOX_RELAY_DATABASE_URL"),
		"the shipping service's PostgreSQL URL (env SHIPPING_DATABASE_URL, then OUTBOX_RELAY_DATABASE_URL)")
	fs.StringVar(&brokers, "kafka-brokers", envOr("OUTBOX_RELAY_KAFKA_BROKERS"), "comma-separated brokers (env OUTBOX_RELAY_KAFKA_BROKERS)")
	fs.StringVar(&topics, "topic", "outbox.event.order", "comma-separated topics to consume")
	fs.StringVar(&cfg.consumer, "consumer", "shipping", "consumer name: the key of its processed_events rows")
	fs.StringVar(&cfg.group, "group", "", "Kafka consumer group (default: the consumer name); a fresh group replays the topic")
	fs.StringVar(&cfg.schema, "schema", "shipping", "schema of the inbox tables, shipments and counters")
	fs.StringVar(&policy, "policy", string(poison.Quarantine),
		"permanent failures: quarantine (dead-letter the event, its aggregate waits) or halt; wait, the earlier name of quarantine, still works")
	fs.DurationVar(&cfg.commitInterval, "commit-interval", time.Second, "offset commit cadence (batched)")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", 10*time.Second, "consumer group session and rebalance timeout")
	fs.IntVar(&cfg.batchSize, "batch-size", 0, "most events applied in one transaction (0: the library default; 1: one transaction per event)")
	fs.DurationVar(&cfg.batchLinger, "batch-linger", 0, "how long a partition waits for more records before it applies a partial batch (0: the library default)")
	fs.IntVar(&cfg.concurrency, "concurrency", 0, "partitions applied at the same time (0: the library default, the pool size; 1: one at a time)")
	fs.DurationVar(&cfg.untilIdle, "until-idle", 0, "exit after this long without an event (0: run until SIGTERM)")
	fs.DurationVar(&cfg.duration, "duration", 0, "exit after this long (0: no limit)")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", "serve /metrics here (empty: off)")
	fs.StringVar(&level, "log-level", "warn", "debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %v", fs.Args()))
	}
	if cfg.databaseURL == "" {
		errs = append(errs, errors.New("--database-url (or SHIPPING_DATABASE_URL / OUTBOX_RELAY_DATABASE_URL) is required"))
	}
	cfg.brokers, cfg.topics = splitList(brokers), splitList(topics)
	if len(cfg.brokers) == 0 {
		errs = append(errs, errors.New("--kafka-brokers (or OUTBOX_RELAY_KAFKA_BROKERS) is required"))
	}
	if len(cfg.topics) == 0 {
		errs = append(errs, errors.New("--topic is required"))
	}
	if cfg.group == "" {
		cfg.group = cfg.consumer
	}
	p, err := parsePolicy(policy)
	if err != nil {
		errs = append(errs, err)
	}
	cfg.policy = p
	if cfg.commitInterval <= 0 || cfg.sessionTimeout < 6*time.Second || cfg.untilIdle < 0 || cfg.duration < 0 {
		errs = append(errs, errors.New("--commit-interval must be positive, --session-timeout at least 6s (the broker's minimum), --until-idle and --duration not negative"))
	}
	if cfg.batchSize < 0 || cfg.batchLinger < 0 || cfg.concurrency < 0 {
		errs = append(errs, errors.New("--batch-size, --batch-linger and --concurrency must not be negative (0: the library default)"))
	}
	if cfg.logLevel, err = zerolog.ParseLevel(level); err != nil || level == "" {
		errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", level))
	}
	return cfg, errors.Join(errs...)
}

// parsePolicy reads --policy: a poison.Policy, or "wait", the name the
// inbox gave quarantine before it took the relay's vocabulary, kept as an
// alias of quarantine so that existing command lines keep working.
func parsePolicy(s string) (poison.Policy, error) {
	if s == "wait" {
		return poison.Quarantine, nil
	}
	return poison.ParsePolicy(s)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "shipping:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "shipping:", err)
		return 1
	}
	return 0
}

// poolConfig parses the database URL and makes the pool big enough for
// concurrency: each partition applying a batch holds a connection for the
// whole transaction, and two more leave room for the dead-letter writes and
// the final totals query. A larger pool_max_conns in the URL is kept.
func poolConfig(databaseURL string, concurrency int) (*pgxpool.Config, error) {
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("--database-url: %w", err)
	}
	pcfg.MaxConns = max(pcfg.MaxConns, int32(min(concurrency, 1<<20))+2)
	return pcfg, nil
}

// service is the shipping service's state: its own database.
type service struct {
	shipments, counters string // quoted tables
}

func serve(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	pcfg, err := poolConfig(cfg.databaseURL, cfg.concurrency)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := inbox.Migrate(ctx, pool, cfg.schema); err != nil {
		return err
	}
	s := &service{
		shipments: pgx.Identifier{cfg.schema, "shipments"}.Sanitize(),
		counters:  pgx.Identifier{cfg.schema, "counters"}.Sanitize(),
	}
	if err := s.createTables(ctx, pool); err != nil {
		return err
	}

	zl := zerolog.New(stderr).Level(cfg.logLevel).With().Timestamp().Str("service", "shipping").Logger()
	log := slog.New(zerolog.NewSlogHandler(zl))
	reg := prometheus.NewRegistry()
	metrics := inboxprom.New(reg)
	if cfg.metricsAddr != "" {
		ln, err := net.Listen("tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
		go srv.Serve(ln) //nolint:errcheck
		defer srv.Close()
	}
	otel.SetTextMapPropagator(propagation.TraceContext{}) // inbox reads traceparent with the global propagator
	c, err := inbox.New(inbox.Config{
		Name:           cfg.consumer,
		GroupID:        cfg.group,
		Brokers:        cfg.brokers,
		Topics:         cfg.topics,
		Pool:           pool,
		Schema:         cfg.schema,
		Handler:        s.handle,
		Policy:         cfg.policy,
		CommitInterval: cfg.commitInterval,
		BatchSize:      cfg.batchSize,
		BatchLinger:    cfg.batchLinger,
		Concurrency:    cfg.concurrency,
		TuneReader: func(rc *kafka.ReaderConfig) {
			rc.SessionTimeout = cfg.sessionTimeout
			rc.RebalanceTimeout = cfg.sessionTimeout
			rc.JoinGroupBackoff = time.Second
		},
	}, inbox.WithMetrics(metrics), inbox.WithLogger(log))
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "shipping: consumer %q, group %q, topics %v, schema %q\n", cfg.consumer, cfg.group, cfg.topics, cfg.schema)

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.duration > 0 {
		runCtx, cancel = context.WithTimeout(runCtx, cfg.duration)
		defer cancel()
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	if cfg.untilIdle > 0 {
		go exitWhenIdle(runCtx, cancel, c, cfg.untilIdle)
	}
	progress := time.NewTicker(time.Second)
	defer progress.Stop()
	var runErr error
loop:
	for {
		select {
		case runErr = <-done:
			break loop
		case <-progress.C:
			st := c.Stats()
			fmt.Fprintf(stdout, "shipping: applied %d, duplicates absorbed %d, dead-lettered %d, parked %d, batch transactions %d\n",
				st.Applied, st.Duplicates, st.DeadLettered, st.Parked, st.Batches)
		}
	}
	st := c.Stats()
	var shipments, counter int64
	qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer qcancel()
	if err := pool.QueryRow(qctx, `SELECT (SELECT count(*) FROM `+s.shipments+`), (SELECT n FROM `+s.counters+` WHERE name = 'shipments')`).
		Scan(&shipments, &counter); err != nil {
		return fmt.Errorf("read totals: %w", err)
	}
	fmt.Fprintf(stdout, "shipping: done: applied %d, duplicates absorbed %d, dead-lettered %d, parked %d, offset commits %d; "+
		"shipments in table %d, shipments counter %d\n",
		st.Applied, st.Duplicates, st.DeadLettered, st.Parked, st.Commits, shipments, counter)
	if shipments != counter {
		return fmt.Errorf("shipments table has %d rows but the counter says %d: an effect was applied twice", shipments, counter)
	}
	return runErr
}

// exitWhenIdle cancels once no event was handled for idle (after the first
// one, or after 3×idle if none arrives at all).
func exitWhenIdle(ctx context.Context, cancel func(), c *inbox.Consumer, idle time.Duration) {
	total := func() int64 { st := c.Stats(); return st.Applied + st.Duplicates + st.Parked + st.DeadLettered }
	last, lastChange, start := total(), time.Now(), time.Now()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := total(); n != last {
			last, lastChange = n, time.Now()
		}
		if (last > 0 && time.Since(lastChange) >= idle) || (last == 0 && time.Since(start) >= 3*idle) {
			cancel()
			return
		}
	}
}

func (s *service) createTables(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+s.shipments+` (
		order_id    text PRIMARY KEY,
		event_id    uuid NOT NULL,
		customer_id text NOT NULL,
		items       int NOT NULL,
		created_at  timestamptz NOT NULL DEFAULT now()
	);
	CREATE TABLE IF NOT EXISTS `+s.counters+` (name text PRIMARY KEY, n bigint NOT NULL);
	INSERT INTO `+s.counters+` (name, n) VALUES ('shipments', 0) ON CONFLICT DO NOTHING`)
	if err != nil {
		return fmt.Errorf("create shipping tables: %w", err)
	}
	return nil
}

// orderConfirmed is the part of the order.confirmed payload (schema 1)
// that shipping needs.
type orderConfirmed struct {
	OrderID    string `json:"order_id"`
	CustomerID string `json:"customer_id"`
	Items      []struct {
		SKU      string `json:"sku"`
		Quantity int    `json:"qty"`
	} `json:"items"`
}

// handle creates the shipment of a confirmed order and counts it. Both run
// in the inbox's transaction: they commit together with the
// processed_events row, or not at all. Other event types are ignored (and
// still registered, so reconciliation sees them as processed).
func (s *service) handle(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
	if ev.EventType != "order.confirmed" {
		return nil
	}
	if ev.SchemaVersion != 1 {
		return poison.Permanent(fmt.Errorf("order.confirmed schema_version %d is not supported (want 1)", ev.SchemaVersion))
	}
	var p orderConfirmed
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return poison.Permanent(fmt.Errorf("order.confirmed payload: %w", err))
	}
	if p.OrderID == "" {
		p.OrderID = ev.AggregateID
	}
	items := 0
	for _, it := range p.Items {
		items += it.Quantity
	}
	tag, err := tx.Exec(ctx, `INSERT INTO `+s.shipments+` (order_id, event_id, customer_id, items) VALUES ($1, $2, $3, $4)`,
		p.OrderID, ev.ID, p.CustomerID, items)
	if err != nil {
		return fmt.Errorf("create shipment for %s: %w", p.OrderID, err)
	}
	if err := inbox.ExpectRows(tag, 1); err != nil {
		return err
	}
	// Not idempotent on its own: the inbox is what keeps it right.
	tag, err = tx.Exec(ctx, `UPDATE `+s.counters+` SET n = n + 1 WHERE name = 'shipments'`)
	if err != nil {
		return fmt.Errorf("count shipment: %w", err)
	}
	return inbox.ExpectRows(tag, 1)
}
