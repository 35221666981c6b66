//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// bigPayload is a jsonb payload of about n bytes: over --max-batch-bytes
// (900 KiB by default), the event can never become a record.
func bigPayload(n int) string {
	return `{"blob": "` + strings.Repeat("x", n) + `"}`
}

// TestQuarantineSurvivesFailover: relay A leads, relay B stands by from
// before the poison event. Aggregate X gets v1 (published), v2 too large
// (dead) and v3 (parked). A is killed with kill -9 and B takes over; B must
// know the quarantine from the table, so v4 is parked too, and after `dlq
// discard v2`, v3 and v4 arrive in order after v1.
func TestQuarantineSurvivesFailover(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	a := startNode(t, env, "relay-a")
	waitLeader(t, []*relayNode{a}, nil, time.Now(), 60*time.Second)
	b := startNode(t, env, "relay-b")
	if !within(30*time.Second, 100*time.Millisecond, b.readyStandby) {
		h, err := b.ready()
		t.Fatalf("relay-b not a ready standby: %+v %v", h, err)
	}
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	load := startDLLoad(t, env, others, 20, 1, 3, 10*time.Millisecond)

	const X = "agg-failover-quarantined"
	xw := newAggWriter(env, X, others)
	v1 := xw.writeN(ctx, t, 1, 0)
	if !c.WaitFor(idsOf(v1), 30*time.Second, 0) {
		t.Fatalf("v1 of %s not delivered", X)
	}
	poison, _ := xw.mustWrite(ctx, t, nil, bigPayload(1500<<10))
	ev3, lsn3 := xw.mustWrite(ctx, t, nil, "")
	v3 := []Event{ev3}
	rows := waitDL(t, env, X, 30*time.Second, "v2 dead + v3 parked", func(r []dlRow) bool { return len(r) >= 2 })
	checkQuarantine(t, rows, poison, v3, "too_large", "too large")
	// Past v3, the slot never redelivers the poison to relay-b: only the
	// table can tell relay-b that X is quarantined.
	if !within(30*time.Second, 50*time.Millisecond, func() bool { return env.ConfirmedAtLeast(lsn3) }) {
		t.Fatalf("confirmed_flush_lsn %s did not pass v3's commit %s", env.ConfirmedFlush(), lsn3)
	}

	a.r.Kill9()
	killed := time.Now()
	nb, took := waitLeader(t, []*relayNode{a, b}, a, killed, leTimeout+leWALSender+3*leSlack)
	t.Logf("relay-b took over %s after kill -9 of relay-a", took.Round(time.Millisecond))
	if nb != b {
		t.Fatalf("leader is %s, want relay-b", nb.name)
	}
	v4 := xw.writeN(ctx, t, 1, 0)
	rows = waitDL(t, env, X, 30*time.Second, "v4 parked by the new leader", func(r []dlRow) bool { return len(r) >= 3 })
	checkQuarantine(t, rows, poison, append(append([]Event(nil), v3...), v4...), "too_large", "too large")
	time.Sleep(time.Second) // wall-clock: a negative window: give a wrongly published v4 time to show up
	if seen := seenIDs(c.Records(), idsOf(v3, v4)); len(seen) > 0 {
		t.Fatalf("events of the quarantined aggregate published by the new leader before the discard: %v", seen)
	}

	res := env.RunCLI(60*time.Second, nil, "dlq", "discard", poison.ID, "--reason", "too large to publish")
	if res.Code != 0 {
		t.Fatalf("dlq discard: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	v5 := xw.writeN(ctx, t, 1, 0)
	load.Stop(t)
	want := append(append(append(append([]Event(nil), v1...), v3...), v4...), v5...)
	expected := union(others.Committed(), idsOf(want))
	if !c.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("not every event arrived after the discard (missing %d)", c.Missing(expected))
	}
	dups := checkAggStream(t, c.Records(), X, want)
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: idsOf([]Event{poison})})
	RequireOK(t, rep)
	msg := fmt.Sprintf("TestQuarantineSurvivesFailover: takeover %s; %s: v1 published, v2 dead, v3 parked by relay-a, v4 parked by relay-b; after discard v1,v3,v4,v5 in order (dups %d); others=%d delivered=%d dups=%d; total %s",
		took.Round(time.Millisecond), X, dups, len(others.Committed()), rep.Delivered, rep.Duplicates, time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestQuarantineLockDoesNotBlockStream holds a quarantined aggregate's
// lock, as `dlq retry` does while it re-publishes, for more than twice the
// relay's wal_sender_timeout. Meanwhile the aggregate gets a new event,
// other aggregates must keep flowing, status updates must keep going out
// and the replication connection must not be dropped. After the lock is
// released the new event is parked.
func TestQuarantineLockDoesNotBlockStream(t *testing.T) {
	inSuites(t, parallel, stack)
	const walSenderTimeout = 5 * time.Second
	const hold = 2*walSenderTimeout + 2*time.Second
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relay := env.StartRelay("OUTBOX_RELAY_METRICS_ADDR="+addr, "OUTBOX_RELAY_WAL_SENDER_TIMEOUT="+walSenderTimeout.String())
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const L = "agg-locked"
	lw := newAggWriter(env, L, others)
	before := lw.writeN(ctx, t, 2, 0)
	bad := `{"bad": 1}`
	poison, _ := lw.mustWrite(ctx, t, &bad, "")
	waitDL(t, env, L, 30*time.Second, "the poison dead", func(r []dlRow) bool { return len(r) >= 1 })
	if !c.WaitFor(idsOf(before), 30*time.Second, 0) {
		t.Fatalf("events of %s before the poison not delivered", L)
	}

	// Take the aggregate's quarantine lock the way dlq retry does.
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 0))`,
		env.Table, env.AggType, L); err != nil {
		t.Fatal(err)
	}
	m0 := scrape(t, addr)
	locked := time.Now()
	parked := lw.writeN(ctx, t, 1, 0) // waits for the lock in the relay
	during := NewLedger()
	dw := env.NewWriter(during)
	for time.Since(locked) < hold {
		if _, err := dw.Write(ctx, []string{"free-1", "free-2", "free-3"}, true); err != nil {
			t.Fatal(err)
		}
		// wall-clock: paces the other aggregates' writes while the lock is held
		time.Sleep(50 * time.Millisecond)
	}
	// Everything of the other aggregates arrives while the lock is held.
	if !c.WaitFor(during.Committed(), 10*time.Second, 0) {
		t.Fatalf("other aggregates stalled behind the quarantine lock: %d of %d written during the hold are missing",
			c.Missing(during.Committed()), len(during.Committed()))
	}
	m1 := scrape(t, addr)
	heldFor := time.Since(locked)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	starts0, starts1 := m0.must(t, "outbox_relay_replication_starts_total"), m1.must(t, "outbox_relay_replication_starts_total")
	st0, st1 := m0.must(t, "outbox_relay_status_updates_total"), m1.must(t, "outbox_relay_status_updates_total")
	if starts1 != starts0 {
		t.Errorf("the replication stream restarted while the lock was held (starts %v -> %v):\n%s", starts0, starts1,
			strings.Join(relay.LogLines("replication stream ended", 5), "\n"))
	}
	if st1-st0 < float64(hold/(2*time.Second)) {
		t.Errorf("only %v status updates in %s while the lock was held", st1-st0, heldFor.Round(time.Millisecond))
	}
	rows := waitDL(t, env, L, 30*time.Second, "the new event parked after the lock", func(r []dlRow) bool { return len(r) >= 2 })
	checkQuarantine(t, rows, poison, parked, "headers")
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	expected := union(others.Committed(), during.Committed(), idsOf(before))
	if !c.WaitFor(expected, 60*time.Second, time.Second) {
		t.Fatalf("not every event arrived (missing %d)", c.Missing(expected))
	}
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: idsOf([]Event{poison}, parked)})
	RequireOK(t, rep)
	msg := fmt.Sprintf("TestQuarantineLockDoesNotBlockStream: lock held %s (wal_sender_timeout %s): %d events of other aggregates delivered meanwhile, %v status updates, replication starts %v -> %v; delivered=%d dups=%d; total %s",
		heldFor.Round(time.Millisecond), walSenderTimeout, len(during.Committed()), st1-st0, starts0, starts1,
		rep.Delivered, rep.Duplicates, time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// scrape reads addr's /metrics, failing the test on an error.
func scrape(t *testing.T, addr string) metricsScrape {
	t.Helper()
	m, err := scrapeMetrics(addr)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	return m
}

// must returns the unlabelled sample name, failing the test without one.
func (m metricsScrape) must(t *testing.T, name string) float64 {
	t.Helper()
	v, ok := m.get(name, "")
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	return v
}

// TestQuarantineRowOfAnotherSystem: a dead-letter row written by another
// PostgreSQL system (a dump restored into a new cluster: LSNs start lower
// there) quarantines its aggregate whatever its LSN. Its position is not
// comparable with this system's, so every new event of the aggregate is
// parked behind it; `dlq discard` then publishes them in order.
func TestQuarantineRowOfAnotherSystem(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	const R = "agg-restored"
	foreign := newUUID(t)
	// Far ahead of this system's WAL: compared as a raw LSN, every new
	// event would be "before" it and published.
	env.Exec(`insert into `+dlTable+` (outbox_table, event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, payload, topic, tx_lsn, tx_ordinal, commit_time, status, reason, class, system_identifier)
		values ($1, $2, $3, $4, 1, 'order.created', 1, '{}'::bytea, $5, 'FFFF/0', 0, now(), 'dead', 'restored from another cluster', 'permanent', '1')`,
		env.Table, foreign, env.AggType, R, env.Topic)
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	rw := newAggWriter(env, R, others)
	parked := rw.writeN(ctx, t, 3, 10*time.Millisecond)
	rows := waitDL(t, env, R, 30*time.Second, "3 new events parked", func(r []dlRow) bool { return len(r) >= 4 })
	// dlRows orders by LSN: the foreign row, at FFFF/0, comes last.
	if last := rows[len(rows)-1]; last.EventID != foreign || last.Status != "dead" {
		t.Fatalf("rows %v: want the foreign dead row", rows)
	}
	for i, ev := range parked {
		if r := rows[i]; r.EventID != ev.ID || r.Status != "parked" {
			t.Fatalf("row %d = %s, want %s parked (rows %v)", i, r, ev.ID, rows)
		}
	}
	res := env.RunCLI(60*time.Second, nil, "dlq", "discard", foreign, "--reason", "restored row")
	if res.Code != 0 {
		t.Fatalf("dlq discard: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	final := rw.writeN(ctx, t, 2, 10*time.Millisecond)
	want := append(append([]Event(nil), parked...), final...)
	expected := union(others.Committed(), idsOf(want))
	if !c.WaitFor(expected, 60*time.Second, time.Second) {
		t.Fatalf("not every event arrived after the discard (missing %d)", c.Missing(expected))
	}
	dups := checkAggStream(t, c.Records(), R, want)
	RequireOK(t, c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second}))
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	t.Logf("TestQuarantineRowOfAnotherSystem: a foreign row at FFFF/0 parked %d new events; after the discard %d events in order (dups %d); total %s",
		len(parked), len(want), dups, time.Since(t0).Round(time.Millisecond))
}

// TestExactlyOnceQuarantineLockOutlastsTransactionTimeout: with
// --delivery exactly-once and a 3 s --transaction-timeout, an operator
// holds a quarantined aggregate's lock (as dlq retry does) for three
// transaction timeouts while the aggregate gets a new event, written in one
// PostgreSQL transaction between two events of other aggregates. The event
// before it commits at once (the transaction ends before the waiting event);
// no Kafka transaction stays open into the timeout, so the stream never
// restarts and nothing is reported fenced. After the lock is released the
// event is parked and everything else arrives once, read_committed.
func TestExactlyOnceQuarantineLockOutlastsTransactionTimeout(t *testing.T) {
	inSuites(t, parallel, stack)
	const timeout = 3 * time.Second
	const hold = 3 * timeout
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relay := env.StartRelay(append(env.eosArgs(), "OUTBOX_RELAY_METRICS_ADDR="+addr,
		"OUTBOX_RELAY_TRANSACTION_TIMEOUT="+timeout.String())...)
	c := StartTxnConsumer(t, env.Topic, env.Partitions, true)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const L = "agg-locked"
	lw := newAggWriter(env, L, others)
	bad := `{"bad": 1}`
	poison, _ := lw.mustWrite(ctx, t, &bad, "")
	waitDL(t, env, L, 30*time.Second, "the poison dead", func(r []dlRow) bool { return len(r) >= 1 })

	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `select pg_advisory_xact_lock(hashtextextended($1 || '/' || $2 || '/' || $3, 0))`,
		env.Table, env.AggType, L); err != nil {
		t.Fatal(err)
	}
	m0 := scrape(t, addr)
	locked := time.Now()
	known := others.Committed()
	parked := lw.writeN(ctx, t, 1, 0) // [other, L, other] in one transaction; L waits for the lock
	var first Event                   // the other aggregate's event before L's
	for id, ev := range others.Committed() {
		if _, ok := known[id]; !ok && ev.AggregateID == lw.mixes[lw.n%3] {
			first = ev
		}
	}
	if first.ID == "" {
		t.Fatal("the event written before the held one is not in the ledger")
	}
	if !c.WaitFor(map[string]Event{first.ID: first}, timeout, 0) {
		t.Fatalf("the event before the held one (%s of %s) not committed within the transaction timeout (%s) while the lock is held",
			first.ID, first.AggregateID, timeout)
	}
	committedAfter := time.Since(locked)
	for time.Since(locked) < hold {
		if !relay.Running() {
			t.Fatalf("relay exited while the lock was held (code %d)", relay.exitCode)
		}
		// wall-clock: the operator's hold, three transaction timeouts
		time.Sleep(100 * time.Millisecond)
	}
	m1 := scrape(t, addr)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if s0, s1 := m0.must(t, "outbox_relay_replication_starts_total"), m1.must(t, "outbox_relay_replication_starts_total"); s1 != s0 {
		t.Errorf("the replication stream restarted while the lock was held (starts %v -> %v):\n%s", s0, s1,
			strings.Join(relay.LogLines("kafka transaction", 5), "\n"))
	}
	if lines := relay.LogLines("fenced by a newer producer", 5); len(lines) > 0 {
		t.Errorf("reported as fenced:\n%s", strings.Join(lines, "\n"))
	}
	rows := waitDL(t, env, L, 30*time.Second, "the new event parked after the lock", func(r []dlRow) bool { return len(r) >= 2 })
	checkQuarantine(t, rows, poison, parked, "headers")
	after := NewLedger()
	if _, err := env.NewWriter(after).Write(ctx, []string{"free-1", "free-2"}, true); err != nil {
		t.Fatal(err)
	}
	expected := union(others.Committed(), after.Committed())
	if !c.WaitFor(expected, 60*time.Second, time.Second) {
		t.Fatalf("not every event arrived (missing %d)", c.Missing(expected))
	}
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: idsOf([]Event{poison}, parked)})
	RequireOK(t, rep)
	if rep.Duplicates != 0 {
		t.Errorf("read_committed consumer saw %d duplicates, want 0", rep.Duplicates)
	}
	msg := fmt.Sprintf("TestExactlyOnceQuarantineLockOutlastsTransactionTimeout: lock held %s (--transaction-timeout %s): the event before the held one committed after %s; delivered=%d dups=%d",
		hold, timeout, committedAfter.Round(time.Millisecond), rep.Delivered, rep.Duplicates)
	t.Log(msg)
	fmt.Println(msg)
}
