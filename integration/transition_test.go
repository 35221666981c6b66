//go:build integration

package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxprom"
)

// txDriver opens transactions through pgx or database/sql, so each test
// runs the same steps with both adapters.
type txDriver struct {
	name  string
	begin func(ctx context.Context) (tx outbox.Tx, commit, rollback func() error, err error)
	close func()
}

func pgxDriver(t *testing.T, ctx context.Context, conns int32) txDriver {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return txDriver{
		name: "pgx",
		begin: func(ctx context.Context) (outbox.Tx, func() error, func() error, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			bg := context.WithoutCancel(ctx)
			return outbox.PgxTx(tx), func() error { return tx.Commit(bg) }, func() error { return tx.Rollback(bg) }, nil
		},
		close: pool.Close,
	}
}

func sqlDriver(t *testing.T, ctx context.Context, conns int) txDriver {
	t.Helper()
	db, err := sql.Open("pgx", databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return txDriver{
		name: "database/sql",
		begin: func(ctx context.Context) (outbox.Tx, func() error, func() error, error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return outbox.SQLTx(tx), tx.Commit, tx.Rollback, nil
		},
		close: func() { _ = db.Close() },
	}
}

// ordersTable creates public.it_orders_<sfx> (dropped when t ends) and
// returns its quoted name.
func ordersTable(t *testing.T, env *Env) string {
	t.Helper()
	q := pgx.Identifier{"public", "it_orders_" + env.Sfx}.Sanitize()
	env.Exec(`CREATE TABLE ` + q + ` (id text PRIMARY KEY, customer_id text NOT NULL, status text NOT NULL, version bigint NOT NULL)`)
	t.Cleanup(func() { env.Exec(`DROP TABLE IF EXISTS ` + q) })
	return q
}

// conflictCount reads outbox_producer_transition_conflicts_total{labels}.
func conflictCount(t *testing.T, reg *prometheus.Registry, aggregateType, eventType string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "outbox_producer_transition_conflicts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelsAre(m, map[string]string{"aggregate_type": aggregateType, "event_type": eventType}) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelsAre(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

// TestTransitionRace: 50 goroutines, each in its own transaction, confirm
// the same pending order through Writer.Transition, with pgx and then with
// database/sql. Exactly one wins: one order.confirmed event in the outbox
// table and on the topic, the order at version 2; the 49 others get
// ErrInvalidTransition, are counted as conflicts, and commit nothing. The
// winner holds its transaction open for a moment, so most losers wait on
// the row lock and take PostgreSQL's re-check path rather than simply
// reading the committed state.
func TestTransitionRace(t *testing.T) {
	inSuites(t, parallel, stack)
	const racers = 50
	env := NewEnv(t, EnvOptions{Partitions: 3})
	orders := ordersTable(t, env)
	table, err := migrations.ParseTable(env.Table)
	if err != nil {
		t.Fatal(err)
	}
	relay := env.StartRelay()
	consumer := StartConsumer(t, env.Topic, env.Partitions)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	winners := map[string]string{} // order id -> winning event id
	for _, mk := range []func() txDriver{
		func() txDriver { return pgxDriver(t, ctx, racers+2) },
		func() txDriver { return sqlDriver(t, ctx, racers+2) },
	} {
		drv := mk()
		t.Run(drv.name, func(t *testing.T) {
			defer drv.close()
			reg := prometheus.NewRegistry()
			w := outbox.NewWriter(table, outbox.WithMetrics(outboxprom.New(reg)))
			id := fmt.Sprintf("ord-%s-%s", env.Sfx, strings.ReplaceAll(drv.name, "/", ""))
			env.Exec(`INSERT INTO `+orders+` (id, customer_id, status, version) VALUES ($1, 'cust-1', 'pending', 1)`, id)

			type result struct {
				err     error
				event   *outbox.Event
				elapsed time.Duration
				commit  error
			}
			results := make([]result, racers)
			var ready, done sync.WaitGroup
			start := make(chan struct{})
			for i := range racers {
				ready.Add(1)
				done.Add(1)
				go func() {
					defer done.Done()
					r := &results[i]
					tx, commit, rollback, err := drv.begin(ctx)
					if err != nil {
						r.err = err
						ready.Done()
						return
					}
					// A statement, so the connection is taken and the
					// transaction open before the start signal.
					if err := tx.Exec(ctx, `SELECT 1`); err != nil {
						r.err = err
						ready.Done()
						_ = rollback()
						return
					}
					ready.Done()
					<-start
					r.event = &outbox.Event{
						AggregateType: "order", AggregateID: id, EventType: "order.confirmed", SchemaVersion: 1,
						Payload: fmt.Appendf(nil, `{"order_id":%q,"racer":%d}`, id, i),
					}
					began := time.Now()
					r.err = w.Transition(ctx, tx, outbox.Transition{
						SQL:   `UPDATE ` + orders + ` SET status = 'confirmed', version = version + 1 WHERE id = $1 AND status = 'pending' RETURNING version`,
						Args:  []any{id},
						Event: r.event,
					})
					r.elapsed = time.Since(began)
					if r.err == nil {
						time.Sleep(200 * time.Millisecond) // wall-clock: hold the row lock: the others queue behind it
					}
					// Losers commit too: their transactions must hold nothing.
					r.commit = commit()
				}()
			}
			ready.Wait()
			close(start)
			done.Wait()

			var won, lost, waited int
			var winner *outbox.Event
			for i, r := range results {
				switch {
				case r.commit != nil:
					t.Errorf("racer %d: commit: %v", i, r.commit)
				case r.err == nil:
					won++
					winner = r.event
				case errors.Is(r.err, outbox.ErrInvalidTransition):
					lost++
					if r.event.EventID != (outbox.Event{}).EventID || r.event.AggregateVersion != 0 {
						t.Errorf("racer %d lost but its event was filled in: id %s, version %d", i, r.event.EventID, r.event.AggregateVersion)
					}
					if r.elapsed > 100*time.Millisecond {
						waited++
					}
				default:
					t.Errorf("racer %d: %v", i, r.err)
				}
			}
			if won != 1 || lost != racers-1 {
				t.Fatalf("%d won, %d got ErrInvalidTransition; want 1 and %d", won, lost, racers-1)
			}
			if winner.AggregateVersion != 2 {
				t.Errorf("winner's event has version %d, want 2 (from RETURNING)", winner.AggregateVersion)
			}
			if got := conflictCount(t, reg, "order", "order.confirmed"); got != racers-1 {
				t.Errorf("outbox_producer_transition_conflicts_total{order,order.confirmed} = %g, want %d", got, racers-1)
			}

			var n int
			var eventID string
			var version int64
			if err := env.DB.QueryRow(ctx, `SELECT count(*), min(event_id::text), min(aggregate_version) FROM `+env.QuotedTable()+
				` WHERE aggregate_id = $1`, id).Scan(&n, &eventID, &version); err != nil {
				t.Fatal(err)
			}
			if n != 1 || eventID != winner.EventID.String() || version != 2 {
				t.Fatalf("outbox holds %d events for %s (first %s, version %d); want exactly the winner's %s at version 2",
					n, id, eventID, version, winner.EventID)
			}
			var status string
			if err := env.DB.QueryRow(ctx, `SELECT status, version FROM `+orders+` WHERE id = $1`, id).Scan(&status, &version); err != nil {
				t.Fatal(err)
			}
			if status != "confirmed" || version != 2 {
				t.Fatalf("order %s is %s at version %d, want confirmed at 2: a losing transaction changed it", id, status, version)
			}
			winners[id] = winner.EventID.String()
			t.Logf("%s: 1 winner, %d conflicts counted (%d of them waited on the winner's row lock), 1 event in the outbox",
				drv.name, lost, waited)
		})
	}
	if t.Failed() {
		return
	}

	// The relay publishes exactly the winners' events: one per order.
	want := map[string]Event{}
	for _, ev := range winners {
		want[ev] = Event{ID: ev}
	}
	if !consumer.WaitFor(want, 30*time.Second, 2*time.Second) {
		t.Fatalf("the winners' events did not reach %s\n%s", env.Topic, relay.LogTail(20))
	}
	per := map[string]int{}
	for _, r := range consumer.Records() {
		per[r.Key]++
		if r.Headers["event_type"] != "order.confirmed" || r.Headers["aggregate_version"] != "2" || winners[r.Key] != r.EventID() {
			t.Errorf("unexpected record for %s: event %s, type %s, version %s", r.Key, r.EventID(), r.Headers["event_type"], r.Headers["aggregate_version"])
		}
	}
	for id := range winners {
		if per[id] != 1 {
			t.Errorf("%s: %d records on the topic, want 1", id, per[id])
		}
	}
}

// TestTransitionUnexpectedRows: a change that matches more rows than
// ExpectRows (a WHERE clause that is not specific enough), or fewer but not
// none, returns ErrUnexpectedRows and appends nothing; the caller rolls
// back and the orders stay as they were. Also the shapes Transition
// accepts: RETURNING sets the version, no RETURNING leaves the caller's,
// RETURNING inside a WITH works with pgx and is refused clearly by
// database/sql when the outer statement returns no column.
func TestTransitionUnexpectedRows(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	orders := ordersTable(t, env)
	table, err := migrations.ParseTable(env.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, mk := range []func() txDriver{
		func() txDriver { return pgxDriver(t, ctx, 2) },
		func() txDriver { return sqlDriver(t, ctx, 2) },
	} {
		drv := mk()
		t.Run(drv.name, func(t *testing.T) {
			defer drv.close()
			reg := prometheus.NewRegistry()
			w := outbox.NewWriter(table, outbox.WithMetrics(outboxprom.New(reg)))
			cust := "cust-" + strings.ReplaceAll(drv.name, "/", "")
			for i := 1; i <= 3; i++ {
				env.Exec(`INSERT INTO `+orders+` (id, customer_id, status, version) VALUES ($1, $2, 'pending', 1)`,
					fmt.Sprintf("%s-%d", cust, i), cust)
			}
			event := func(id string, version int64) *outbox.Event {
				return &outbox.Event{AggregateType: "order", AggregateID: id, AggregateVersion: version,
					EventType: "order.confirmed", SchemaVersion: 1, Payload: []byte(`{}`)}
			}
			// run runs tr in a transaction of its own, committing when it
			// succeeds and rolling back otherwise, as a caller would.
			run := func(tr outbox.Transition) error {
				tx, commit, rollback, err := drv.begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if err := w.Transition(ctx, tx, tr); err != nil {
					if rerr := rollback(); rerr != nil {
						t.Fatalf("rollback: %v", rerr)
					}
					return err
				}
				return commit()
			}
			state := func() string {
				var s string
				if err := env.DB.QueryRow(ctx, `SELECT string_agg(id || ':' || status || ':' || version, ' ' ORDER BY id) FROM `+orders+
					` WHERE customer_id = $1`, cust).Scan(&s); err != nil {
					t.Fatal(err)
				}
				return s
			}
			events := func() int {
				var n int
				if err := env.DB.QueryRow(ctx, `SELECT count(*) FROM `+env.QuotedTable()+` WHERE aggregate_id LIKE $1`, cust+"-%").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			initial := state()

			// Not specific enough: the customer's three pending orders match.
			ev := event(cust+"-1", 0)
			err := run(outbox.Transition{
				SQL:   `UPDATE ` + orders + ` SET status = 'confirmed', version = version + 1 WHERE customer_id = $1 AND status = 'pending' RETURNING version`,
				Args:  []any{cust},
				Event: ev,
			})
			if !errors.Is(err, outbox.ErrUnexpectedRows) || !strings.Contains(err.Error(), "changed 3 rows, want 1") {
				t.Fatalf("three matching rows: err = %v, want ErrUnexpectedRows", err)
			}
			if s := state(); s != initial || events() != 0 || ev.EventID != (outbox.Event{}).EventID {
				t.Fatalf("after the refused transition: orders %q (want %q), %d events, event id %s", s, initial, events(), ev.EventID)
			}

			// Fewer but not none: ExpectRows 4, three match; without RETURNING.
			err = run(outbox.Transition{
				SQL:        `UPDATE ` + orders + ` SET status = 'cancelled' WHERE customer_id = $1 AND status = 'pending'`,
				Args:       []any{cust},
				Event:      event(cust+"-1", 9),
				ExpectRows: 4,
			})
			if !errors.Is(err, outbox.ErrUnexpectedRows) || !strings.Contains(err.Error(), "changed 3 rows, want 4") {
				t.Fatalf("three of four rows: err = %v, want ErrUnexpectedRows", err)
			}
			if s := state(); s != initial || events() != 0 {
				t.Fatalf("after the refused transition: orders %q, %d events", s, events())
			}

			// No RETURNING: rows affected decides, the caller's version is written.
			ev = event(cust+"-1", 41)
			if err := run(outbox.Transition{
				SQL:   `UPDATE ` + orders + ` SET status = 'confirmed' WHERE id = $1 AND status = 'pending'`,
				Args:  []any{cust + "-1"},
				Event: ev,
			}); err != nil {
				t.Fatalf("without RETURNING: %v", err)
			}
			// RETURNING through a WITH (the outer SELECT returns the column).
			ev2 := event(cust+"-2", 0)
			if err := run(outbox.Transition{
				SQL: `WITH u AS (UPDATE ` + orders + ` SET status = 'confirmed', version = version + 1 WHERE id = $1 AND status = 'pending' RETURNING version)
					SELECT version * 10 FROM u`,
				Args:  []any{cust + "-2"},
				Event: ev2,
			}); err != nil {
				t.Fatalf("RETURNING in a WITH: %v", err)
			}
			var v1, v2 int64
			if err := env.DB.QueryRow(ctx, `SELECT
				(SELECT aggregate_version FROM `+env.QuotedTable()+` WHERE event_id = $1),
				(SELECT aggregate_version FROM `+env.QuotedTable()+` WHERE event_id = $2)`, ev.EventID, ev2.EventID).Scan(&v1, &v2); err != nil {
				t.Fatal(err)
			}
			if v1 != 41 || v2 != 20 {
				t.Fatalf("stored versions %d and %d, want 41 (the caller's) and 20 (returned)", v1, v2)
			}

			// RETURNING only inside a WITH whose outer command returns nothing:
			// pgx counts the outer command's rows; database/sql cannot, and says so.
			ev3 := event(cust+"-3", 5)
			err = run(outbox.Transition{
				SQL: `WITH l AS (SELECT id FROM ` + orders + ` WHERE id = $1 AND status = 'pending' FOR UPDATE)
					UPDATE ` + orders + ` o SET status = 'confirmed' FROM (SELECT 1 AS x) AS returning_nothing WHERE o.id = $1 AND o.id IN (SELECT id FROM l)`,
				Args:  []any{cust + "-3"},
				Event: ev3,
			})
			if err != nil {
				t.Fatalf("no RETURNING (an alias containing the word): %v", err)
			}
			err = run(outbox.Transition{
				SQL: `WITH u AS (UPDATE ` + orders + ` SET version = version + 1 WHERE id = $1 AND status = 'confirmed' RETURNING id)
					INSERT INTO ` + orders + ` (id, customer_id, status, version) SELECT id || '-copy', 'x', 'pending', 1 FROM u`,
				Args:  []any{cust + "-3"},
				Event: event(cust+"-3", 7),
			})
			switch drv.name {
			case "pgx":
				if err != nil {
					t.Fatalf("RETURNING only inside WITH, pgx: %v", err)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), "returns 0 columns") {
					t.Fatalf("RETURNING only inside WITH, database/sql: err = %v, want a refusal naming the 0 columns", err)
				}
			}
			if got := conflictCount(t, reg, "order", "order.confirmed"); got != 0 {
				t.Errorf("conflicts counted: %g, want 0 (none of these matched zero rows)", got)
			}
		})
	}
}

// TestTransitionRepeatableRead: under REPEATABLE READ a transition that
// loses the race gets a serialization failure (SQLSTATE 40001), not
// ErrInvalidTransition; its retry, in a new transaction, sees the
// committed state and gets ErrInvalidTransition. (docs: Writer.Transition)
func TestTransitionRepeatableRead(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	orders := ordersTable(t, env)
	table, err := migrations.ParseTable(env.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	w := outbox.NewWriter(table)
	id := "ord-rr-" + env.Sfx
	env.Exec(`INSERT INTO `+orders+` (id, customer_id, status, version) VALUES ($1, 'c', 'pending', 1)`, id)
	confirm := func(tx pgx.Tx) error {
		return w.Transition(ctx, outbox.PgxTx(tx), outbox.Transition{
			SQL:  `UPDATE ` + orders + ` SET status = 'confirmed', version = version + 1 WHERE id = $1 AND status = 'pending' RETURNING version`,
			Args: []any{id},
			Event: &outbox.Event{AggregateType: "order", AggregateID: id, EventType: "order.confirmed",
				SchemaVersion: 1, Payload: []byte(`{}`)},
		})
	}
	rr := pgx.TxOptions{IsoLevel: pgx.RepeatableRead}
	first, err := pool.BeginTx(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(ctx) }()
	second, err := pool.BeginTx(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = second.Rollback(ctx) }()
	// Both take their snapshot while the order is pending.
	for _, tx := range []pgx.Tx{first, second} {
		if _, err := tx.Exec(ctx, `SELECT 1 FROM `+orders+` WHERE id = $1`, id); err != nil {
			t.Fatal(err)
		}
	}
	if err := confirm(first); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- confirm(second) }() // waits on first's row lock
	// wall-clock: lets second reach first's row lock before first commits
	time.Sleep(100 * time.Millisecond)
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-errc
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("the losing REPEATABLE READ transition: err = %v, want SQLSTATE 40001", err)
	}
	_ = second.Rollback(ctx)
	err = pgx.BeginTxFunc(ctx, pool, rr, confirm)
	if !errors.Is(err, outbox.ErrInvalidTransition) {
		t.Fatalf("the retry: err = %v, want ErrInvalidTransition", err)
	}
}
