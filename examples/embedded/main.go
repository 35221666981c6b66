// Command embedded is an orders service that runs outbox-relay in-process,
// beside its own HTTP handlers: no relay to deploy, and the service's
// events still reach Kafka at least once, in order per order.
//
// Each handler changes the orders table and appends the matching event to
// the outbox table in the same transaction (orders.go). The relay in the
// same process streams the outbox to Kafka. Every replica of the service
// runs it for the same slot; a PostgreSQL advisory lock elects one leader,
// which streams, while the others stand by and take over within
// Leader.PollInterval when it stops or dies.
//
// Usage:
//
//	outbox-relay migrate   # once per deployment: outbox table, publication, slot
//	go run ./examples/embedded --addr 127.0.0.1:8081 &
//	go run ./examples/embedded --addr 127.0.0.1:8082 &   # a second replica
//	curl -d '{"customer":"cust-42","amount":1250}' 127.0.0.1:8081/orders
//	curl -X POST 127.0.0.1:8082/orders/ord-.../confirm
//	curl 127.0.0.1:8081/relay/readyz   # {"status":"ready","role":"leader",...}
//	go run ./examples/tail --from-beginning --duration 8s
//
// The database and brokers come from OUTBOX_RELAY_DATABASE_URL and
// OUTBOX_RELAY_KAFKA_BROKERS, like the binary's. SIGTERM stops taking
// requests, lets the relay publish what they committed, and exits 0.
package main

import (
	"context"
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

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// config is the parsed command line.
type config struct {
	addr     string
	logLevel slog.Level
	// table is the outbox table (Relay.Database.Table, parsed) that the
	// handlers write to; the orders table goes into its schema.
	table migrations.Table
	relay relay.Config
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("embedded", flag.ContinueOnError)
	fs.SetOutput(stderr)
	// Start from the relay's defaults, so that each flag shows its own.
	cfg := config{relay: relay.DefaultConfig()}
	db := &cfg.relay.Database
	var brokers, level string
	fs.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "HTTP listen address of the orders API and of /relay/")
	fs.StringVar(&db.URL, "database-url", os.Getenv("OUTBOX_RELAY_DATABASE_URL"), "PostgreSQL URL (env OUTBOX_RELAY_DATABASE_URL)")
	fs.StringVar(&brokers, "kafka-brokers", os.Getenv("OUTBOX_RELAY_KAFKA_BROKERS"), "comma-separated Kafka brokers (env OUTBOX_RELAY_KAFKA_BROKERS)")
	fs.StringVar(&db.Table, "table", envOr("OUTBOX_RELAY_TABLE", db.Table), "outbox table, [schema.]name (env OUTBOX_RELAY_TABLE)")
	fs.StringVar(&db.Slot, "slot", envOr("OUTBOX_RELAY_SLOT", db.Slot), "replication slot, shared by every replica (env OUTBOX_RELAY_SLOT)")
	fs.StringVar(&db.Publication, "publication", envOr("OUTBOX_RELAY_PUBLICATION", db.Publication), "publication of the outbox table (env OUTBOX_RELAY_PUBLICATION)")
	fs.StringVar(&cfg.relay.Publish.TopicTemplate, "topic-template", envOr("OUTBOX_RELAY_TOPIC_TEMPLATE", cfg.relay.Publish.TopicTemplate),
		"topic of an event, from {aggregate_type} and {event_type} (env OUTBOX_RELAY_TOPIC_TEMPLATE)")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := cfg.logLevel.UnmarshalText([]byte(level)); err != nil {
		return config{}, fmt.Errorf("--log-level %q: use debug, info, warn or error", level)
	}
	for _, b := range strings.Split(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			cfg.relay.Kafka.Brokers = append(cfg.relay.Kafka.Brokers, b)
		}
	}
	// A demo convenience: the first event creates its topic. Production
	// topics are usually provisioned with their own partitions and
	// retention, and this stays off.
	cfg.relay.Publish.CreateTopics = true

	// Validate up front, so that a typo exits 2 before any connection.
	// Each problem is a *relay.FieldError named by its Go path; renaming
	// the ones this command sets reports them as the flags the user typed.
	if err := cfg.relay.Validate(); err != nil {
		return config{}, withFlagNames(err, map[string]string{
			"Database.URL": "--database-url", "Kafka.Brokers": "--kafka-brokers", "Database.Table": "--table",
			"Database.Slot": "--slot", "Database.Publication": "--publication", "Publish.TopicTemplate": "--topic-template",
		})
	}
	t, err := migrations.ParseTable(db.Table)
	if err != nil {
		return config{}, fmt.Errorf("--table: %w", err)
	}
	cfg.table = t
	return cfg, nil
}

// withFlagNames renames the fields of err's *relay.FieldErrors found in
// flags (Go path -> flag).
func withFlagNames(err error, flags map[string]string) error {
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	for _, e := range errs {
		var fe *relay.FieldError
		if errors.As(e, &fe) && flags[fe.Field] != "" {
			fe.Field = flags[fe.Field]
		}
	}
	return err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(args []string, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "embedded:", err)
		}
		return 2
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		log.Error("orders service stopped", slog.Any("error", err))
		return 1
	}
	return 0
}

// serve runs the orders API and the relay until ctx ends or the relay
// fails for good.
func serve(ctx context.Context, cfg config, log *slog.Logger) error {
	// The handlers' own pool. The relay opens its connections itself: a
	// replication connection and the leader lock's session cannot be
	// pooled, and its short queries stay out of the handlers' way.
	pool, err := pgxpool.New(ctx, cfg.relay.Database.URL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	orders, err := newOrders(ctx, pool, cfg.table, log)
	if err != nil {
		return err
	}

	// New only validates; Run connects.
	r, err := relay.New(cfg.relay, relay.WithLogger(log.With(slog.String("component", "relay"))))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	orders.register(mux)
	// /relay/healthz, /relay/readyz (role: leader or standby), /relay/metrics.
	mux.Handle("/relay/", http.StripPrefix("/relay", r.Handler()))
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving orders and /relay/", slog.String("addr", ln.Addr().String()))

	// The relay's context is not ctx: on SIGTERM the HTTP server stops
	// first, and only then the relay, so that it still publishes what the
	// last requests committed instead of leaving it to the next leader.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRelay()
	relayed := make(chan error, 1)
	go func() { relayed <- r.Run(relayCtx) }() // every replica runs it; one leads

	select {
	case <-ctx.Done(): // SIGTERM: shut down below
	case err := <-relayed:
		// Before ctx ends Run returns only on a failure no retry can
		// cure (a lost slot, a schema problem, a rejected password), with
		// the slot position held: nothing is lost, but nothing is
		// published either. Stop the whole service so that it shows,
		// rather than take orders whose events wait for an operator.
		_ = srv.Close()
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		return fmt.Errorf("relay: %w", err)
	case err := <-served:
		stopRelay()
		return errors.Join(fmt.Errorf("http: %w", err), <-relayed)
	}
	log.Info("shutting down: finishing requests, then draining the relay")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		log.Warn("requests still running after 10s, closing them", slog.Any("error", err))
	}
	stopRelay()
	// Run drains for at most ShutdownTimeout: what it read is published
	// and confirmed, so the next leader re-sends nothing.
	return <-relayed
}
