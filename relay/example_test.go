package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/relay"
)

// A service runs the relay beside its own HTTP handlers; every replica
// does, one leads. SIGTERM drains what the relay read before it returns.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	cfg := relay.DefaultConfig()
	cfg.Database.URL = os.Getenv("DATABASE_URL")
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	r, err := relay.New(cfg, relay.WithLogger(slog.Default()))
	if err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/relay/", http.StripPrefix("/relay", r.Handler())) // /relay/readyz, /relay/metrics
	srv := &http.Server{Addr: ":8080", Handler: mux}
	go func() { _ = srv.ListenAndServe() }()
	defer srv.Close()

	if err := r.Run(ctx); err != nil {
		log.Fatal(err) // a failure no retry can cure; the slot position is held
	}
}

// New reports every invalid field at once, each a *FieldError naming the
// field by its Go path.
func ExampleNew_invalid() {
	var cfg relay.Config // zero fields mean their defaults
	cfg.Database.URL = "postgres://app@db:5432/app"
	cfg.Publish.MaxBatch = -1
	cfg.Publish.Linger = 2 * time.Second
	_, err := relay.New(cfg)
	fmt.Println(err)
	var fe *relay.FieldError
	if errors.As(err, &fe) && errors.Is(fe.Err, relay.ErrRequired) {
		fmt.Println("first problem: set", fe.Field)
	}
	// Output:
	// Kafka.Brokers: is required
	// Publish.MaxBatch -1: use 1..100000
	// Publish.Linger 2s: use at most 1s (5ms, like the Java producer's linger.ms, is the default; negative sends at once)
	// first problem: set Kafka.Brokers
}

// Two relays of one process (two outbox tables, each with its slot) register their
// collectors on the service's registry, told apart by a label.
func ExampleWithMetrics() {
	reg := prometheus.NewRegistry()
	for _, outbox := range []string{"orders_outbox", "billing_outbox"} {
		cfg := relay.DefaultConfig()
		cfg.Database.URL = "postgres://app@db:5432/app"
		cfg.Database.Table, cfg.Database.Slot, cfg.Database.Publication = outbox, outbox, outbox
		cfg.Kafka.Brokers = []string{"kafka:9092"}
		_, err := relay.New(cfg, relay.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"outbox": outbox}, reg)))
		fmt.Println(outbox, err)
	}
	// Output:
	// orders_outbox <nil>
	// billing_outbox <nil>
}

// Credentials that rotate or expire: the hook runs before every
// connection the relay opens (pool, replication, leader lock, each
// reconnect) and sets that connection's password - here from a mounted
// secret, re-read each time; a cloud IAM token is fetched the same way.
// The application's own pool (the outbox writer's, the inbox's) takes the
// same hook through pgxpool.Config.BeforeConnect.
func ExampleDatabaseConfig_beforeConnect() {
	password := func(_ context.Context, cfg *pgconn.Config) error {
		b, err := os.ReadFile("/var/run/secrets/db/password")
		if err != nil {
			return fmt.Errorf("read the database password: %w", err)
		}
		cfg.Password = strings.TrimSuffix(string(b), "\n")
		return nil
	}

	cfg := relay.DefaultConfig()
	cfg.Database.URL = "postgres://outbox_relay@db:5432/app?sslmode=verify-full" // no password here
	cfg.Database.BeforeConnect = password
	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
	if _, err := relay.New(cfg); err != nil {
		log.Fatal(err)
	}

	pc, err := pgxpool.ParseConfig("postgres://app@db:5432/app?sslmode=verify-full")
	if err != nil {
		log.Fatal(err)
	}
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error { return password(ctx, &cc.Config) }
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
}
