//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxprom"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// The tests of the batched inbox (issue 18) against the real stack: every
// one of them counts effects per event id in a table without a unique
// constraint, so an event applied twice shows up as a 2 instead of being
// hidden by a key.

// ibFastGroup shortens the consumer group timers so that joins, leaves and
// rebalances take seconds (6s is the broker's minimum session timeout).
func ibFastGroup(rc *kafka.ReaderConfig) {
	rc.SessionTimeout = 6 * time.Second
	rc.RebalanceTimeout = 6 * time.Second
	rc.HeartbeatInterval = time.Second
	rc.JoinGroupBackoff = 500 * time.Millisecond
}

// ibPool opens a pool of at most maxConns connections, closed at cleanup
// (registered now, so it runs after the cleanups of consumers started later).
func ibPool(t *testing.T, ctx context.Context, maxConns int32) *pgxpool.Pool {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// ibTables migrates the inbox schema and creates the handler's state table
// (one row per aggregate, guarded by version) and its effects table: one
// row per application, deliberately without a unique constraint.
func ibTables(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) (state, effects string) {
	t.Helper()
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	state, effects = pgx.Identifier{schema, "state"}.Sanitize(), pgx.Identifier{schema, "effects"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+state+` (id text PRIMARY KEY, version bigint NOT NULL);
		CREATE TABLE `+effects+` (seq bigserial, event_id uuid NOT NULL, aggregate_id text NOT NULL, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return state, effects
}

// ibHandlers returns a Handler that applies aggregate versions strictly in
// sequence (versionedState: a gap or a repeat fails ExpectRows, so it is
// dead-lettered) and appends one effects row, and a BatchHandler that does
// the same for each event of evs, failing the whole call at the first bad
// event.
func ibHandlers(state, effects string, fail func(*record.Event) error) (inbox.Handler, inbox.BatchHandler) {
	if fail == nil {
		fail = func(*record.Event) error { return nil }
	}
	apply := versionedState(state, fail)
	one := func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		if err := apply(ctx, tx, ev); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+effects+` (event_id, aggregate_id, version) VALUES ($1, $2, $3)`,
			ev.ID, ev.AggregateID, ev.AggregateVersion)
		return err
	}
	batch := func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
		for _, ev := range evs {
			if err := one(ctx, tx, ev); err != nil {
				return err
			}
		}
		return nil
	}
	return one, batch
}

// ibEffectCounts returns how often each event's effect was applied.
func ibEffectCounts(t *testing.T, db *DB, effects string) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := map[string]int{}
	err := db.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT event_id::text, count(*) FROM `+effects+` GROUP BY 1`)
		if err != nil {
			return err
		}
		var id string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&id, &n}, func() error { out[id] = n; return nil })
		return err
	})
	if err != nil {
		t.Fatalf("effects per event_id: %v", err)
	}
	return out
}

// ibStrings returns the first column of a query's rows.
func ibStrings(t *testing.T, db *DB, sql string, args ...any) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []string
	err := db.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// ibCheckEffects fails unless every id of want has exactly one effect and
// no other event has any.
func ibCheckEffects(t *testing.T, db *DB, effects string, want []string) {
	t.Helper()
	got := ibEffectCounts(t, db, effects)
	var bad []string
	for _, id := range want {
		if got[id] != 1 {
			bad = append(bad, fmt.Sprintf("%s:%d", id, got[id]))
		}
	}
	wantSet := make(map[string]bool, len(want))
	for _, id := range want {
		wantSet[id] = true
	}
	for id, n := range got {
		if !wantSet[id] {
			bad = append(bad, fmt.Sprintf("%s:%d (not expected at all)", id, n))
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		t.Fatalf("effects per event_id must all be 1: %d of %d wrong, e.g. %v", len(bad), len(want), bad[:min(len(bad), 10)])
	}
	// The effects of each aggregate were appended in version order, 1 apart.
	if n := countRows(t, db, `SELECT count(*) FROM (SELECT version - lag(version) OVER (PARTITION BY aggregate_id ORDER BY seq) AS d
		FROM `+effects+`) s WHERE d <> 1`); n != 0 {
		t.Fatalf("%d effects are out of per-aggregate version order", n)
	}
}

// ibTopicRecords is the number of records in topic (the sum of the
// partitions' end offsets).
func ibTopicRecords(t *testing.T, topic string, partitions int) int64 {
	t.Helper()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := 0; p < partitions; p++ {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := kafkaClient().ListOffsets(ctx, req)
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var n int64
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			t.Fatalf("list offsets of %s partition %d: %v", topic, po.Partition, po.Error)
		}
		n += po.LastOffset
	}
	return n
}

// ibRun is one Consumer.Run in a goroutine.
type ibRun struct {
	name   string
	c      *inbox.Consumer
	cancel context.CancelFunc
	done   chan error
}

// ibStart runs c until stop (or the test's cleanup).
func ibStart(t *testing.T, ctx context.Context, name string, c *inbox.Consumer) *ibRun {
	t.Helper()
	rctx, cancel := context.WithCancel(ctx)
	r := &ibRun{name: name, c: c, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return within 30s of its cancellation", name)
		}
	})
	t.Logf("%s: started", name)
	return r
}

// stop cancels Run and fails the test unless it returns nil within 30s.
func (r *ibRun) stop(t *testing.T) {
	t.Helper()
	start := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		if err != nil {
			t.Fatalf("%s: Run = %v, want nil after a cancel", r.name, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: Run did not return within 30s of its cancellation", r.name)
	}
	t.Logf("%s: stopped in %s: %+v", r.name, time.Since(start).Round(time.Millisecond), r.c.Stats())
}

func ibHandled(st inbox.Stats) int64 { return st.Applied + st.Duplicates + st.Parked + st.DeadLettered }

// shippingProgress matches the once-a-second progress line of
// examples/shipping (not the final "done" line).
var shippingProgress = regexp.MustCompile(`shipping: applied (\d+), duplicates absorbed (\d+), dead-lettered (\d+), parked (\d+)[,\n]`)

// lastProgress returns the last progress line's applied and duplicates
// (-1 when none was printed yet).
func lastProgress(out string) (applied, duplicates int) {
	m := shippingProgress.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return -1, -1
	}
	a, _ := strconv.Atoi(m[len(m)-1][1])
	d, _ := strconv.Atoi(m[len(m)-1][2])
	return a, d
}

// TestInboxBatchKill9Restarts runs outbox → relay → Kafka →
// examples/shipping (batches of up to 200 events) under a steady load of
// order.confirmed events and kills the consumer with SIGKILL five times at
// varied moments while it works through a backlog or keeps up, restarting
// it each time; a final run drains the topic. Every committed event must
// have exactly one shipment, the non-idempotent counter must agree, and
// processed_events must hold every event once. Then a forced redelivery of
// the whole topic under a fresh consumer group (same consumer name) must
// apply nothing and count every record as a duplicate.
func TestInboxBatchKill9Restarts(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	schema := inboxSchema(t, env)
	env.StartRelay()
	bin := shippingBin(t)
	consumer := "shipb_" + env.Sfx
	// The application_name tells the consumer's sessions in pg_stat_activity.
	shippingURL := databaseURL + "&application_name=" + consumer
	if !strings.Contains(databaseURL, "?") {
		shippingURL = databaseURL + "?application_name=" + consumer
	}
	procEnv := processEnv([]string{"OUTBOX_RELAY_DATABASE_URL=" + shippingURL, "OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(kafkaBrokers, ",")})
	args := func(extra ...string) []string {
		return append([]string{"--topic", env.Topic, "--consumer", consumer, "--schema", schema, "--session-timeout", "6s",
			"--batch-size", "200", "--commit-interval", "250ms", "--log-level", "info"}, extra...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	processedT := pgx.Identifier{schema, "processed_events"}.Sanitize()
	shipments := pgx.Identifier{schema, "shipments"}.Sanitize()
	processed := func() int {
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		defer qcancel()
		var n int
		// Fails until the first shipping process has run inbox.Migrate.
		if err := env.DB.QueryRow(qctx, `SELECT count(*) FROM `+processedT+` WHERE consumer = $1`, consumer).Scan(&n); err != nil {
			return 0
		}
		return n
	}

	// Steady load: 10 orders per transaction, about 400 events/s.
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	w.EventType, w.SchemaVersion = "order.confirmed", 1
	var stopWriting atomic.Bool
	writerDone := make(chan error, 1)
	go func() {
		seq := 0
		for !stopWriting.Load() {
			ids := make([]string, 10)
			for i := range ids {
				seq++
				ids[i] = fmt.Sprintf("ord-%06d", seq)
			}
			if _, err := w.Write(ctx, ids, true); err != nil {
				writerDone <- err
				return
			}
			// wall-clock: paces the load writer (a transaction every 20 ms)
			time.Sleep(20 * time.Millisecond)
		}
		writerDone <- nil
	}()
	defer stopWriting.Store(true)

	// Each run is killed once it has applied `after` events of its own (a
	// restarted run first works through the backlog that piled up while the
	// group waited for the dead member's session to expire: full batches),
	// plus a delay; the last kill comes once the run has caught up (small
	// batches under the steady load).
	kills := []struct {
		after int
		delay time.Duration
	}{{1, 0}, {60, 150 * time.Millisecond}, {400, 0}, {1200, 40 * time.Millisecond}, {-1, 700 * time.Millisecond}}
	var summary []string
	hitOpen := 0 // kills that caught a transaction of the consumer open
	for i, k := range kills {
		select {
		case err := <-writerDone:
			t.Fatalf("writer stopped: %v", err)
		default:
		}
		before := processed()
		metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
		p := StartProc(t, fmt.Sprintf("shipping-%d", i+1), bin, procEnv, args("--metrics-addr", metricsAddr)...)
		cond := func() bool { return processed()-before >= k.after }
		if k.after < 0 {
			// Caught up: (nearly) everything written and published so far
			// is processed. The smaller count covers both the relay's lag
			// and a record it might publish twice.
			cond = func() bool {
				n := processed()
				return n-before > 0 && int64(n) >= min(ibTopicRecords(t, env.Topic, env.Partitions), int64(ledger.CommittedCount()))-20
			}
		}
		if !within(45*time.Second, 10*time.Millisecond, cond) {
			t.Fatalf("shipping-%d: processed %d events of its own within 45s (kill point %d); processed_events %d, records in the topic %d (fewer processed than records: events lost)\n%s",
				i+1, processed()-before, k.after, processed(), ibTopicRecords(t, env.Topic, env.Partitions), tail(p.Output(), 30))
		}
		// wall-clock: the kill's delay under load, so it lands at a varied point of the stream
		time.Sleep(k.delay)
		// What the run did up to now, and whether a batch transaction is
		// open at this moment: read just before the kill.
		m, merr := scrapeMetrics(metricsAddr)
		open := countRows(t, env.DB, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND xact_start IS NOT NULL`, consumer)
		p.Kill9()
		applied := processed() - before
		if open > 0 {
			hitOpen++
		}
		line := fmt.Sprintf("run %d: applied %d (processed_events)", i+1, applied)
		if merr == nil {
			label := `consumer="` + consumer + `"`
			dups, _ := m.get("outbox_relay_inbox_duplicates_absorbed_total", label)
			batches, _ := m.get("outbox_relay_inbox_batch_events_count", label)
			events, _ := m.get("outbox_relay_inbox_batch_events_sum", label)
			line += fmt.Sprintf(", duplicates absorbed %.0f, %.0f batch transactions of %.0f events on average (metrics)", dups, batches, events/max(batches, 1))
		} else {
			pa, pd := lastProgress(p.Output())
			line += fmt.Sprintf(", duplicates absorbed %d (last progress line, applied %d there; metrics: %v)", pd, pa, merr)
		}
		summary = append(summary, line+fmt.Sprintf(", killed with %d transactions open", open))
	}
	stopWriting.Store(true)
	if err := <-writerDone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	total := ledger.CommittedCount()
	if n := len(ledger.Pending()); n != 0 {
		t.Fatalf("%d events with an unknown commit outcome", n)
	}
	// The relay has published every committed event before the final run
	// starts, so --until-idle cannot stop it early.
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return ibTopicRecords(t, env.Topic, env.Partitions) >= int64(total) }) {
		t.Fatalf("the relay published %d of %d events within 30s", ibTopicRecords(t, env.Topic, env.Partitions), total)
	}
	records := ibTopicRecords(t, env.Topic, env.Partitions)

	final := StartProc(t, "shipping-final", bin, procEnv, args("--until-idle", "3s")...)
	if err := final.Wait(60 * time.Second); err != nil {
		t.Fatalf("shipping-final: %v\n%s", err, tail(final.Output(), 30))
	}
	tot := parseShipping(t, final.Output())
	summary = append(summary, fmt.Sprintf("final run: applied %d, duplicates absorbed %d, offset commits %d", tot.applied, tot.duplicates, tot.commits))
	for _, s := range summary {
		t.Log(s)
	}
	t.Logf("%d of %d kills caught a batch transaction open", hitOpen, len(kills))
	if hitOpen == 0 {
		t.Errorf("no kill caught a transaction of the consumer open: the test did not kill it in the middle of a batch")
	}
	if tot.shipments != total || tot.counter != total || tot.dead != 0 || tot.parked != 0 {
		t.Fatalf("final run %+v: want shipments = counter = %d committed events, nothing dead-lettered or parked", tot, total)
	}
	if n := processed(); n != total {
		t.Fatalf("processed_events has %d rows, want %d", n, total)
	}
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, "inbox_dead_letter"}.Sanitize()); n != 0 {
		t.Fatalf("%d dead-letter rows, want none", n)
	}
	// Exactly one shipment per committed event, none for anything else.
	var want []string
	for id := range ledger.Committed() {
		want = append(want, id)
	}
	got := ibEffectCounts(t, env.DB, shipments)
	var bad []string
	for _, id := range want {
		if got[id] != 1 {
			bad = append(bad, fmt.Sprintf("%s:%d", id, got[id]))
		}
	}
	if len(bad) > 0 || len(got) != total {
		t.Fatalf("shipments per event_id must all be 1: %d wrong (e.g. %v), %d distinct events in shipments for %d committed", len(bad), bad[:min(len(bad), 10)], len(got), total)
	}

	// Forced redelivery: a fresh group reads the whole topic again; the
	// consumer name (the dedupe key) is the same.
	replay := StartProc(t, "shipping-replay", bin, procEnv, args("--group", consumer+"_replay", "--until-idle", "3s")...)
	if err := replay.Wait(60 * time.Second); err != nil {
		t.Fatalf("shipping-replay: %v\n%s", err, tail(replay.Output(), 30))
	}
	rt := parseShipping(t, replay.Output())
	msg := fmt.Sprintf("TestInboxBatchKill9Restarts: %d committed events (%d records), 5 kills; %s; forced redelivery under a fresh group: applied %d, duplicates absorbed %d",
		total, records, strings.Join(summary, "; "), rt.applied, rt.duplicates)
	t.Log(msg)
	fmt.Println(msg)
	if rt.applied != 0 || int64(rt.duplicates) != records || rt.dead != 0 || rt.parked != 0 || rt.shipments != total || rt.counter != total {
		t.Fatalf("forced redelivery %+v: want applied 0, duplicates %d (every record), shipments = counter = %d", rt, records, total)
	}
	if n := processed(); n != total {
		t.Fatalf("processed_events has %d rows after the replay, want %d", n, total)
	}
}

// TestInboxBatchRebalance: instances of one consumer (same Name and
// GroupID) join and leave a 6-partition topic while records keep arriving
// in per-aggregate version order: A alone, B joins, A leaves (its Run
// context is cancelled), C joins. The handler checks aggregate_version
// (an event applied out of order or twice fails ExpectRows and is
// dead-lettered) and appends to an effects table without a unique key.
// Every event must be applied exactly once across the instances and every
// aggregate must reach its last version.
func TestInboxBatchRebalance(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 6})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	state, effects := ibTables(t, ctx, ibPool(t, ctx, 2), schema)
	handler, _ := ibHandlers(state, effects, nil)
	consumer := "rb_" + env.Sfx
	instance := func(name string) *ibRun {
		c, err := inbox.New(inbox.Config{
			Name: consumer, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: ibPool(t, ctx, 6), Schema: schema,
			Handler: handler, BatchSize: 200, CommitInterval: 200 * time.Millisecond, BackoffBase: 10 * time.Millisecond,
			BackoffMax: 100 * time.Millisecond, TuneReader: ibFastGroup,
		})
		if err != nil {
			t.Fatal(err)
		}
		return ibStart(t, ctx, name, c)
	}

	// The load: waves of one new version for each of 40 aggregates, about
	// 1,500 records/s, each wave written (and acknowledged) before the next,
	// so each aggregate's versions are in order in its partition.
	const aggs = 40
	var produced, waves atomic.Int64
	var stopProducing atomic.Bool
	producerDone := make(chan error, 1)
	go func() {
		pw := &kafka.Writer{Addr: kafka.TCP(kafkaBrokers...), Topic: env.Topic, Balancer: &kafka.Murmur2Balancer{},
			RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
		defer pw.Close()
		for v := int64(1); !stopProducing.Load(); v++ {
			msgs := make([]kafka.Message, aggs)
			for a := range msgs {
				msgs[a] = relayRecord(newUUID(t), "order", fmt.Sprintf("agg-%02d", a), v, "order.updated", `{}`)
			}
			if err := pw.WriteMessages(ctx, msgs...); err != nil {
				producerDone <- fmt.Errorf("wave %d: %w", v, err)
				return
			}
			produced.Add(aggs)
			waves.Store(v)
			// wall-clock: paces the producer (a wave every 20 ms)
			time.Sleep(20 * time.Millisecond)
		}
		producerDone <- nil
	}()
	defer stopProducing.Store(true)
	processedT := pgx.Identifier{schema, "processed_events"}.Sanitize()
	processed := func() int64 {
		return int64(countRows(t, env.DB, `SELECT count(*) FROM `+processedT+` WHERE consumer = $1`, consumer))
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if !within(30*time.Second, 50*time.Millisecond, cond) {
			t.Fatalf("%s: not within 30s (produced %d, processed %d)", what, produced.Load(), processed())
		}
	}

	a := instance("A")
	waitFor("A applies", func() bool { return a.c.Stats().Applied > 1000 })
	b := instance("B")
	waitFor("B joins and applies", func() bool { return b.c.Stats().Applied > 1000 })
	aStats := a.c.Stats()
	waitFor("A still applies after the rebalance", func() bool { return a.c.Stats().Applied > aStats.Applied+500 })
	a.stop(t)
	mark := produced.Load()
	waitFor("B takes over A's partitions", func() bool { return processed() >= mark })
	c := instance("C")
	waitFor("C joins and applies", func() bool { return c.c.Stats().Applied > 1000 })
	bStats := b.c.Stats()
	waitFor("B still applies after C joined", func() bool { return b.c.Stats().Applied > bStats.Applied+500 })
	stopProducing.Store(true)
	if err := <-producerDone; err != nil {
		t.Fatalf("producer: %v", err)
	}
	total, lastVersion := produced.Load(), waves.Load()
	waitFor("B and C drain the topic", func() bool { return processed() >= total })
	b.stop(t)
	c.stop(t)

	var applied, dups int64
	for _, r := range []*ibRun{a, b, c} {
		st := r.c.Stats()
		t.Logf("%s: %+v", r.name, st)
		applied += st.Applied
		dups += st.Duplicates
		if st.DeadLettered != 0 || st.Parked != 0 {
			t.Errorf("%s dead-lettered %d and parked %d events: an event was applied out of order (or twice)", r.name, st.DeadLettered, st.Parked)
		}
	}
	msg := fmt.Sprintf("TestInboxBatchRebalance: %d records (%d aggregates × %d versions); applied %d across A, B, C; duplicates absorbed %d",
		total, aggs, lastVersion, applied, dups)
	t.Log(msg)
	fmt.Println(msg)
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, "inbox_dead_letter"}.Sanitize()); n != 0 {
		t.Fatalf("%d dead-letter rows, want none", n)
	}
	if applied != total {
		t.Fatalf("applied %d across the instances, want %d", applied, total)
	}
	if n := processed(); n != total {
		t.Fatalf("processed_events has %d rows, want %d", n, total)
	}
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+state+` WHERE version = $1`, lastVersion); n != aggs {
		t.Fatalf("%d of %d aggregates at version %d", n, aggs, lastVersion)
	}
	ibCheckEffects(t, env.DB, effects, ibStrings(t, env.DB, `SELECT event_id::text FROM `+processedT+` WHERE consumer = $1`, consumer))
}

// TestInboxBatchFailureInBatch: 40 records of 8 aggregates, all in the
// partition before Run, so they are applied in one or two batches. In the
// middle, aggregate x's version 3 fails permanently, and a later event of
// another aggregate fails once with a plain (retryable) error. Exactly the
// failing event is dead-lettered, x's later versions are parked in order,
// every other event is applied once and in order. For the single-event
// Handler and for a BatchHandler that fails the whole call.
func TestInboxBatchFailureInBatch(t *testing.T) {
	inSuites(t, parallel, stack)
	for _, batch := range []bool{false, true} {
		name := "Handler"
		if batch {
			name = "BatchHandler"
		}
		t.Run(name, func(t *testing.T) { ibFailureInBatch(t, batch) })
	}
}

func ibFailureInBatch(t *testing.T, batch bool) {
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 1})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := ibPool(t, ctx, 4)
	state, effects := ibTables(t, ctx, pool, schema)

	aggIDs := []string{"a0", "a1", "a2", "a3", "x", "a5", "a6", "a7"}
	var msgs []kafka.Message
	ids := map[string]map[int64]string{}
	for v := int64(1); v <= 5; v++ {
		for _, agg := range aggIDs {
			id := newUUID(t)
			if ids[agg] == nil {
				ids[agg] = map[int64]string{}
			}
			ids[agg][v] = id
			msgs = append(msgs, relayRecord(id, "order", agg, v, "order.updated", `{}`))
		}
	}
	produce(t, env.Topic, msgs...)

	var flaky atomic.Int32
	var calls, callEvents atomic.Int64
	// Where x v3 first met the handler: how many events of its transaction
	// came before it and (BatchHandler only: a Handler cannot see the rest
	// of its batch) after it, to show it failed in the middle of a batch.
	// Handlers of one partition run one at a time.
	var curTx pgx.Tx
	var inTx int
	xBefore, xAfter := -1, -1
	isX3 := func(ev *record.Event) bool { return ev.AggregateID == "x" && ev.AggregateVersion == 3 }
	fail := func(ev *record.Event) error {
		if ev.AggregateID == "x" && ev.AggregateVersion == 3 {
			return poison.Permanent(errors.New("cannot ship to the moon"))
		}
		if ev.AggregateID == "a1" && ev.AggregateVersion == 4 && flaky.Add(1) == 1 {
			return errors.New("downstream hiccup")
		}
		return nil
	}
	one, many := ibHandlers(state, effects, fail)
	cfg := inbox.Config{
		Name: "fib_" + env.Sfx, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema,
		BatchSize: 100, BatchLinger: 200 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, TuneReader: ibFastGroup,
	}
	if batch {
		cfg.BatchHandler = func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
			calls.Add(1)
			callEvents.Add(int64(len(evs)))
			for i, ev := range evs {
				if isX3(ev) && xBefore < 0 {
					xBefore, xAfter = i, len(evs)-i-1
				}
			}
			return many(ctx, tx, evs)
		}
	} else {
		cfg.Handler = func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
			calls.Add(1)
			callEvents.Add(1)
			if tx != curTx {
				curTx, inTx = tx, 0
			}
			if isX3(ev) && xBefore < 0 {
				xBefore = inTx
			}
			inTx++
			return one(ctx, tx, ev)
		}
	}
	c, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ibStart(t, ctx, "consumer", c)
	if !within(30*time.Second, 20*time.Millisecond, func() bool { return ibHandled(c.Stats()) >= int64(len(msgs)) }) {
		t.Fatalf("not all %d records handled within 30s: %+v", len(msgs), c.Stats())
	}
	time.Sleep(300 * time.Millisecond) // wall-clock: a negative window: nothing more may happen
	st := c.Stats()
	t.Logf("stats %+v; handler calls %d for %d events; x v3 first failed after %d events of its transaction", st, calls.Load(), callEvents.Load(), xBefore)
	if xBefore < 1 || (batch && xAfter < 1) {
		t.Fatalf("x v3 first reached the handler with %d events before it and %d after it in its transaction: the test needs it in the middle of a batch", xBefore, xAfter)
	}
	wantApplied := int64(len(msgs) - 3)
	if n := flaky.Load(); n < 2 {
		t.Fatalf("the handler ran %d times for a1 v4, which fails once: want a failed attempt and a successful one", n)
	}
	if st.Applied != wantApplied || st.DeadLettered != 1 || st.Parked != 2 || st.Duplicates != 0 {
		t.Fatalf("stats %+v: want applied %d, dead-lettered 1, parked 2, duplicates 0", st, wantApplied)
	}
	// A Handler's a1 v4 fails alone and meets the retry policy. A
	// BatchHandler's fails inside a half that is halved again, and the half
	// holding it succeeds: the halving attempts are not retries (docs/design.md),
	// so Retries is 0 there.
	if !batch && st.Retries < 1 {
		t.Fatalf("stats %+v: Retries %d, want >= 1 (a1 v4 failed once and was retried)", st, st.Retries)
	}
	if st.Batches < 1 || st.Batches > int64(len(msgs)/2) {
		t.Errorf("%d batch transactions for %d records: want a few (batched), not one per event", st.Batches, len(msgs))
	}
	for _, agg := range aggIDs {
		want := 5
		if agg == "x" {
			want = 2
		}
		if v := countRows(t, env.DB, `SELECT coalesce((SELECT version FROM `+state+` WHERE id = $1), 0)`, agg); v != want {
			t.Fatalf("aggregate %s at version %d, want %d", agg, v, want)
		}
	}
	var applied []string
	for agg, vs := range ids {
		for v, id := range vs {
			if agg != "x" || v < 3 {
				applied = append(applied, id)
			}
		}
	}
	ibCheckEffects(t, env.DB, effects, applied)
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, "processed_events"}.Sanitize()+` WHERE consumer = $1`, cfg.Name); n != len(applied) {
		t.Fatalf("processed_events has %d rows, want %d", n, len(applied))
	}
	dls, err := c.DeadLetters(ctx, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dls {
		got = append(got, fmt.Sprintf("%s:%s:%d", d.Status, d.AggregateID, d.AggregateVersion))
	}
	if strings.Join(got, ",") != "dead:x:3,parked:x:4,parked:x:5" || dls[0].ID != ids["x"][3] || !strings.Contains(dls[0].Reason, "moon") || dls[0].Attempts < 1 {
		t.Fatalf("dead letters %v, want dead:x:3,parked:x:4,parked:x:5 (first: reason %q, attempts %d)", got, dls[0].Reason, dls[0].Attempts)
	}
	t.Logf("dead letter: attempts %d, reason %q", dls[0].Attempts, dls[0].Reason)
	// Dead-lettered and parked events are final: the offset passes them.
	if !within(10*time.Second, 50*time.Millisecond, func() bool { return committedOffsets(t, cfg.Name, env.Topic, 1)[0] == int64(len(msgs)) }) {
		t.Fatalf("committed offset %d, want %d", committedOffsets(t, cfg.Name, env.Topic, 1)[0], len(msgs))
	}
}

// TestInboxBatchDuplicateInBatch: one batch holds an event twice and an
// event that an earlier run already processed. Each is applied once, both
// redeliveries are counted in Stats.Duplicates and in the
// outbox_relay_inbox_duplicates_absorbed_total metric.
func TestInboxBatchDuplicateInBatch(t *testing.T) {
	inSuites(t, parallel, stack)
	for _, batch := range []bool{false, true} {
		name := "Handler"
		if batch {
			name = "BatchHandler"
		}
		t.Run(name, func(t *testing.T) { ibDuplicateInBatch(t, batch) })
	}
}

func ibDuplicateInBatch(t *testing.T, batch bool) {
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 1})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool := ibPool(t, ctx, 4)
	state, effects := ibTables(t, ctx, pool, schema)
	one, many := ibHandlers(state, effects, nil)
	var mu sync.Mutex
	var batches [][]string // the event ids of each handler call
	newConsumer := func() (*inbox.Consumer, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		cfg := inbox.Config{
			Name: "dib_" + env.Sfx, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema,
			BatchSize: 100, BatchLinger: 200 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
			TuneReader: ibFastGroup,
		}
		if batch {
			cfg.BatchHandler = func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
				var call []string
				for _, ev := range evs {
					call = append(call, ev.ID)
				}
				mu.Lock()
				batches = append(batches, call)
				mu.Unlock()
				return many(ctx, tx, evs)
			}
		} else {
			cfg.Handler = one
		}
		c, err := inbox.New(cfg, inbox.WithMetrics(inboxprom.New(reg)))
		if err != nil {
			t.Fatal(err)
		}
		return c, reg
	}

	// An earlier run processes e0.
	e0, e1, e2, e3 := newUUID(t), newUUID(t), newUUID(t), newUUID(t)
	produce(t, env.Topic, relayRecord(e0, "order", "p", 1, "order.updated", `{}`))
	first, _ := newConsumer()
	r := ibStart(t, ctx, "first", first)
	if !within(30*time.Second, 20*time.Millisecond, func() bool { return first.Stats().Applied == 1 }) {
		t.Fatalf("first run: %+v", first.Stats())
	}
	r.stop(t)

	// One batch: e1, e2, e1 again, e0 again (processed by the first run), e3.
	produce(t, env.Topic,
		relayRecord(e1, "order", "q", 1, "order.updated", `{}`),
		relayRecord(e2, "order", "q", 2, "order.updated", `{}`),
		relayRecord(e1, "order", "q", 1, "order.updated", `{}`),
		relayRecord(e0, "order", "p", 1, "order.updated", `{}`),
		relayRecord(e3, "order", "r", 1, "order.updated", `{}`))
	c, reg := newConsumer()
	ibStart(t, ctx, "second", c)
	if !within(30*time.Second, 20*time.Millisecond, func() bool { return ibHandled(c.Stats()) >= 5 }) {
		t.Fatalf("second run did not handle the 5 records: %+v", c.Stats())
	}
	time.Sleep(300 * time.Millisecond) // wall-clock: a negative window: nothing more may happen
	st := c.Stats()
	mu.Lock()
	calls := slices.Clone(batches)
	mu.Unlock()
	t.Logf("second run: %+v; batch handler calls %v", st, calls)
	if st.Applied != 3 || st.Duplicates != 2 || st.DeadLettered != 0 || st.Parked != 0 {
		t.Fatalf("stats %+v: want applied 3, duplicates 2 (one inside the batch, one processed earlier)", st)
	}
	if batch {
		// The batch handler sees fresh events only: never one twice, never
		// e0 again. (The first call is the first run's, with e0.)
		for _, call := range calls[1:] {
			seen := map[string]bool{}
			for _, id := range call {
				if seen[id] || id == e0 {
					t.Fatalf("a batch handler call got %v: a duplicate passed the dedupe (e0 %s, e1 %s)", call, e0, e1)
				}
				seen[id] = true
			}
		}
	}
	if got := counterValue(t, reg, "outbox_relay_inbox_duplicates_absorbed_total", "dib_"+env.Sfx); got != 2 {
		t.Fatalf("duplicates metric = %v, want 2", got)
	}
	ibCheckEffects(t, env.DB, effects, []string{e0, e1, e2, e3})
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, "processed_events"}.Sanitize()); n != 4 {
		t.Fatalf("processed_events has %d rows, want 4", n)
	}
	if st.Batches != 1 {
		t.Fatalf("the 5 records were applied in %d transactions: the test needs them in one batch", st.Batches)
	}
	if !within(10*time.Second, 50*time.Millisecond, func() bool { return committedOffsets(t, "dib_"+env.Sfx, env.Topic, 1)[0] == 6 }) {
		t.Fatalf("committed offset %d, want 6", committedOffsets(t, "dib_"+env.Sfx, env.Topic, 1)[0])
	}
}
