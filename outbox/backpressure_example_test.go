package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxprom"
)

// A service sheds its non-critical events ("order.viewed") once the relay
// has been down long enough that the database's disk is at risk, and keeps
// writing the ones it cannot lose. One monitor per process reads the
// relay's slot every 5 s; every Append only looks at its last reading.
func ExampleWithBackpressure() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	table := migrations.Table{Schema: "public", Name: "outbox"}
	metrics := outboxprom.New(prometheus.DefaultRegisterer)

	health, err := outbox.NewHealthMonitor(pool, outbox.HealthConfig{
		Slot:  "outbox_relay", // the relay's --slot
		Table: table,
		// Shed views two hours before the WAL reaches its limit, or past
		// 20 GiB retained, or when events wait for more than 10 minutes.
		Soft: outbox.Budget{MinForecast: 2 * time.Hour, MaxRetainedWAL: 20 << 30, MaxOldestEvent: 10 * time.Minute},
		// Stop writing altogether 15 minutes before: the service would
		// rather fail than let PostgreSQL invalidate the slot or fill the disk.
		Hard:       outbox.Budget{MinForecast: 15 * time.Minute},
		DiskBudget: 50 << 30, // the relay's --wal-disk-budget
	}, outbox.WithLogger(slog.Default()), outbox.WithMetrics(metrics))
	if err != nil {
		log.Fatal(err)
	}
	go health.Run(ctx)

	w := outbox.NewWriter(table, outbox.WithBackpressure(health), outbox.WithMetrics(metrics))

	// In a request handler, inside the business transaction:
	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
		AggregateType: "order", AggregateID: "o-42", EventType: "order.viewed",
		SchemaVersion: 1, Payload: []byte(`{"id":"o-42"}`),
		Priority: outbox.PriorityLow, // may be shed; the zero value is critical
	})
	switch {
	case errors.Is(err, outbox.ErrBackpressure):
		// Nothing was written: serve the page without recording the view.
	case err != nil:
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}

// A refusal says which budget and which reading, never the event, so it
// can be logged and mapped to an answer as it is. A hard refusal means
// the service stops writing: answer 503 and let the client retry later.
func ExampleBackpressureError() {
	// What Append returned while the soft budget was crossed:
	var err error = &outbox.BackpressureError{
		Level:   outbox.BackpressureSoft,
		Reasons: []string{"WAL exhaustion forecast 1h20m0s < budget 2h0m0s"},
	}

	var be *outbox.BackpressureError
	if errors.As(err, &be) {
		status := http.StatusOK // a non-critical event is dropped; the request succeeds
		if be.Level == outbox.BackpressureHard {
			status = http.StatusServiceUnavailable
		}
		fmt.Println(errors.Is(err, outbox.ErrBackpressure), status)
		fmt.Println(err)
	}
	// Output:
	// true 200
	// outbox: back-pressure: soft budget crossed (non-critical events are refused): WAL exhaustion forecast 1h20m0s < budget 2h0m0s
}

// NewHealthMonitor checks the whole configuration at once.
func ExampleNewHealthMonitor() {
	_, err := outbox.NewHealthMonitor(nil, outbox.HealthConfig{
		Interval: -time.Second,
		Soft:     outbox.Budget{MaxRetainedWAL: -1}, // negative: not checked, like 0
	})
	fmt.Println(err)
	// Output:
	// outbox: health monitor: db is nil
	// Slot: is required
	// Interval -1s: use a positive duration (0: DefaultHealthInterval)
}
