//go:build integration

package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestReconcile: events committed while no relay runs never reach Kafka,
// and `outbox-relay reconcile` reports exactly them (per event type and by
// id) with exit code 3; rows deleted from a consumer's processed_events are
// reported as not consumed; once the relay has caught up it exits 0.
func TestReconcile(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{Partitions: 3})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	confirmed, cancelled := env.NewWriter(ledger), env.NewWriter(ledger)
	confirmed.EventType, cancelled.EventType = "order.confirmed", "order.cancelled"
	write := func(w *Writer, prefix string, n int) []Event {
		var out []Event
		for i := 0; i < n; i++ {
			evs, err := w.Write(ctx, []string{fmt.Sprintf("%s-%03d", prefix, i)}, true)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, evs...)
		}
		return out
	}
	write(confirmed, "c", 60)
	write(cancelled, "x", 40)
	if !c.WaitFor(ledger.Committed(), 60*time.Second, 0) {
		t.Fatal("events not delivered")
	}

	// A consumer that processed all of them.
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	consumer := "rec_" + env.Sfx
	ic, err := inbox.New(inbox.Config{Name: consumer, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema,
		Handler: func(context.Context, pgx.Tx, *record.Event) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ic.Run(runCtx) }()
	if !within(30*time.Second, 50*time.Millisecond, func() bool { return ic.Stats().Applied >= 100 }) {
		t.Fatalf("consumer applied %d of 100", ic.Stats().Applied)
	}
	stopRun()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// No relay: these are committed to the outbox but never reach Kafka.
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("relay SIGTERM: exited %v code %d", exited, code)
	}
	hidden := append(write(confirmed, "late-c", 10), write(cancelled, "late-x", 5)...)
	// And the consumer "loses" three processed events.
	if _, err := pool.Exec(ctx, `DELETE FROM `+pgx.Identifier{schema, "processed_events"}.Sanitize()+
		` WHERE consumer = $1 AND aggregate_id IN ('c-001', 'c-002', 'x-003')`, consumer); err != nil {
		t.Fatal(err)
	}

	args := []string{"reconcile", "--since", "10m", "--settle", "0s", "--consumer", consumer, "--consumer-schema", schema}
	res := env.RunCLI(60*time.Second, nil, args...)
	t.Logf("reconcile (exit %d):\n%s%s", res.Code, res.Stdout, res.Stderr)
	if res.Code != 3 {
		t.Fatalf("reconcile exit %d, want 3 (missing)", res.Code)
	}
	for _, re := range []string{
		`order\.confirmed\s+70\s+60\s+10\s+58\s+0\s+2`,
		`order\.cancelled\s+45\s+40\s+5\s+39\s+0\s+1`,
		`TOTAL\s+115\s+100\s+15\s+97\s+0\s+3`,
		`missing from Kafka: 15 \(listing 15\)`,
		`not processed by consumer "` + consumer + `": 3`,
	} {
		if !regexp.MustCompile(re).MatchString(res.Stdout) {
			t.Errorf("reconcile output does not match %q", re)
		}
	}
	for _, e := range hidden {
		if !strings.Contains(res.Stdout, e.ID) {
			t.Errorf("missing event %s (%s) not listed", e.ID, e.AggregateID)
		}
	}
	if !strings.Contains(res.Stderr, "events are missing") {
		t.Errorf("stderr: %s", res.Stderr)
	}

	// The relay catches up from its slot: nothing missing from Kafka any more.
	env.StartRelay()
	if !c.WaitFor(ledger.Committed(), 60*time.Second, 0) {
		t.Fatal("late events not delivered after the restart")
	}
	res = env.RunCLI(60*time.Second, nil, "reconcile", "--since", "10m", "--settle", "0s")
	t.Logf("reconcile after catch-up (exit %d):\n%s%s", res.Code, res.Stdout, res.Stderr)
	if res.Code != 0 || !strings.Contains(res.Stdout, "nothing missing") ||
		!regexp.MustCompile(`TOTAL\s+115\s+115\s+0`).MatchString(res.Stdout) {
		t.Fatalf("reconcile after catch-up: exit %d", res.Code)
	}
}
