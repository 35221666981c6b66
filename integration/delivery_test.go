//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func aggName(i int) string { return fmt.Sprintf("agg-%03d", i) }

// waitCaughtUp commits one canary event and waits until it is on the topic and
// the slot's confirmed_flush_lsn has passed its commit.
func waitCaughtUp(t *testing.T, env *Env, c *Consumer, w *Writer, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	evs, err := w.Write(ctx, []string{"canary"}, true)
	if err != nil {
		t.Fatalf("canary: %v", err)
	}
	lsn := env.CurrentInsertLSN()
	exp := map[string]Event{evs[0].ID: evs[0]}
	start := time.Now()
	if !c.WaitFor(exp, timeout, 0) {
		t.Fatalf("canary event %s not delivered within %s", evs[0].ID, timeout)
	}
	if !within(timeout, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(lsn) }) {
		t.Fatalf("confirmed_flush_lsn %s did not reach canary commit %s within %s", env.SlotInfo().ConfirmedFlush, lsn, timeout)
	}
	t.Logf("caught up: canary delivered and confirmed in %s", time.Since(start).Round(time.Millisecond))
}

func TestEndToEnd(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions|pgVersions)
	const (
		writers     = 4
		txPerWriter = 500
		eventsPerTx = 10
		aggregates  = 500
	)
	env := NewEnv(t, EnvOptions{})
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			// Writer w owns aggregates i with i%writers == w, so each
			// aggregate's versions increase in commit order.
			var own []string
			for i := w; i < aggregates; i += writers {
				own = append(own, aggName(i))
			}
			wr := env.NewWriter(ledger)
			rng := rand.New(rand.NewSource(int64(w) + 1))
			for tx := 0; tx < txPerWriter; tx++ {
				ids := make([]string, eventsPerTx)
				for i := range ids {
					ids[i] = own[rng.Intn(len(own))]
				}
				if _, err := wr.Write(ctx, ids, true); err != nil {
					errs <- fmt.Errorf("writer %d tx %d: %w", w, tx, err)
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	wrote := time.Since(start)
	committed := ledger.Committed()
	if len(committed) != writers*txPerWriter*eventsPerTx {
		t.Fatalf("ledger has %d committed events, want %d", len(committed), writers*txPerWriter*eventsPerTx)
	}
	t.Logf("committed %d events in %d transactions in %s", len(committed), writers*txPerWriter, wrote.Round(time.Millisecond))

	ok := c.WaitFor(committed, 3*time.Minute, 2*time.Second)
	elapsed := time.Since(start)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Second})
	msg := fmt.Sprintf("TestEndToEnd: delivered=%d/%d duplicates=%d inversions=%d elapsed=%s (writes %s) max_ts_skew=%s relay_peak_rss=%.1fMiB",
		rep.Delivered, rep.Committed, rep.Duplicates, rep.Inversions, elapsed.Round(time.Millisecond), wrote.Round(time.Millisecond),
		rep.MaxTsSkew.Round(time.Millisecond), mib(relay.PeakRSS()))
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
	if !relay.Running() {
		t.Fatalf("relay exited unexpectedly")
	}
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want a clean exit 0", exited, code)
	}
}

func TestRolledBackNeverAppears(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	wr := env.NewWriter(ledger)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewSource(42))
	pick := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = aggName(rng.Intn(50))
		}
		return ids
	}

	for i := 0; i < 300; i++ {
		commit := rng.Intn(2) == 0
		if _, err := wr.Write(ctx, pick(1+rng.Intn(8)), commit); err != nil {
			t.Fatalf("tx %d: %v", i, err)
		}
		if i%50 == 0 {
			// A transaction that stays open while others commit, then rolls back.
			open, err := env.DB.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			long := wr.NextEvents(pick(5))
			if err := insertEvents(ctx, open, wr.Table, long); err != nil {
				t.Fatal(err)
			}
			for j := 0; j < 3; j++ {
				if _, err := wr.Write(ctx, pick(2), true); err != nil {
					t.Fatal(err)
				}
			}
			if err := open.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			ledger.addRolledBack(long)

			// A committed transaction with a rolled-back savepoint inside.
			tx, err := env.DB.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			kept := wr.NextEvents(pick(3))
			dropped := wr.NextEvents(pick(3))
			kept2 := wr.NextEvents(pick(2))
			if err := insertEvents(ctx, tx, wr.Table, kept); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "savepoint s1"); err != nil {
				t.Fatal(err)
			}
			if err := insertEvents(ctx, tx, wr.Table, dropped); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "rollback to savepoint s1"); err != nil {
				t.Fatal(err)
			}
			if err := insertEvents(ctx, tx, wr.Table, kept2); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			now := time.Now()
			all := append(kept, kept2...)
			for k := range all {
				all[k].CommitTime = now
			}
			ledger.addCommitted(all, "")
			ledger.addRolledBack(dropped)
		}
	}
	committed, rolledBack := ledger.Committed(), ledger.RolledBack()
	t.Logf("committed %d events, rolled back %d", len(committed), len(rolledBack))
	ok := c.WaitFor(committed, time.Minute, 3*time.Second)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: rolledBack})
	msg := fmt.Sprintf("TestRolledBackNeverAppears: committed=%d rolled_back=%d delivered=%d forbidden_seen=%d duplicates=%d",
		len(committed), len(rolledBack), rep.Delivered, len(rep.Forbidden), rep.Duplicates)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
}

func TestBrokerOutage(t *testing.T) {
	inSuites(t, exclusive, stack)
	env := NewEnv(t, EnvOptions{})
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	wr := env.NewWriter(ledger)
	waitCaughtUp(t, env, c, wr, 60*time.Second)

	var stopped atomic.Bool
	t.Cleanup(func() {
		if stopped.Load() {
			StackCtl(t, "kafka-start")
		}
	})
	stopped.Store(true)
	StackCtl(t, "kafka-stop")

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	outage := NewLedger()
	ow := env.NewWriter(outage)
	ow.CaptureLSN = true
	for i := 0; i < 50; i++ {
		ids := make([]string, 10)
		for j := range ids {
			ids[j] = aggName((i*10 + j) % 100)
		}
		if _, err := ow.Write(ctx, ids, true); err != nil {
			t.Fatalf("write during outage: %v", err)
		}
	}
	first, last := outage.FirstCommitLSN(), outage.LastCommitLSN()
	t.Logf("committed %d events during the outage, first commit LSN %s, last %s", outage.CommittedCount(), first, last)

	// For ~10 s the slot must not be confirmed past the first outage commit.
	held := time.Now()
	for time.Since(held) < 10*time.Second {
		if env.ConfirmedAtLeast(first) {
			t.Fatalf("confirmed_flush_lsn %s passed the commit LSN %s of undelivered events while Kafka is down",
				env.SlotInfo().ConfirmedFlush, first)
		}
		if !relay.Running() {
			t.Fatalf("relay exited during the Kafka outage (code %d)", relay.exitCode)
		}
		// wall-clock: probe interval of a negative check held for 10 s
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("confirmed_flush_lsn held at %s (< %s) for 10s", env.SlotInfo().ConfirmedFlush, first)

	StackCtl(t, "kafka-start")
	stopped.Store(false)
	restarted := time.Now()
	expected := outage.Committed()
	for k, v := range ledger.Committed() {
		expected[k] = v
	}
	ok := c.WaitFor(expected, 2*time.Minute, 2*time.Second)
	deliveredIn := time.Since(restarted)
	confirmed := within(60*time.Second, 200*time.Millisecond, func() bool { return env.ConfirmedAtLeast(last) })
	// Record timestamps must be the commit time, not the (much later) produce time.
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second})
	msg := fmt.Sprintf("TestBrokerOutage: delivered=%d/%d duplicates=%d after_restart=%s confirmed_passed_commit=%v (confirmed %s, last commit %s)",
		rep.Delivered, rep.Committed, rep.Duplicates, deliveredIn.Round(time.Millisecond), confirmed, env.SlotInfo().ConfirmedFlush, last)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every event committed during the outage arrived after Kafka restarted")
	}
	RequireOK(t, rep)
	if !confirmed {
		t.Fatalf("confirmed_flush_lsn %s did not pass the last outage commit LSN %s within 60s of delivery", env.SlotInfo().ConfirmedFlush, last)
	}
}

func TestKill9MidStream(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions|pgVersions)
	env := NewEnv(t, EnvOptions{})
	r1 := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	wr := env.NewWriter(ledger)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stop atomic.Bool
	werr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewSource(7))
		for !stop.Load() {
			ids := make([]string, 5)
			for i := range ids {
				ids[i] = aggName(rng.Intn(200))
			}
			if _, err := wr.Write(ctx, ids, true); err != nil {
				werr <- err
				return
			}
			// wall-clock: paces the load writer (a transaction every 2 ms)
			time.Sleep(2 * time.Millisecond)
		}
		werr <- nil
	}()
	stopWriter := func() {
		if !stop.Swap(true) {
			if err := <-werr; err != nil {
				t.Fatalf("writer: %v", err)
			}
		}
	}
	defer stopWriter()

	if !c.WaitCount(2000, 90*time.Second) {
		t.Fatalf("fewer than 2000 records delivered within 90s (got %d, committed %d)", c.Count(), ledger.CommittedCount())
	}
	deliveredAtKill := c.Count()
	r1.Kill9()
	committedAtKill := ledger.CommittedCount()
	t.Logf("killed relay after %d records delivered, %d events committed", deliveredAtKill, committedAtKill)
	// wall-clock: the relay's outage: load piles up while it is down
	time.Sleep(3 * time.Second)
	// The walsender of the dead relay needs a moment to notice the broken connection.
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active 30s after kill -9: %+v", env.SlotInfo())
	}
	r2 := env.StartRelay()
	if !c.WaitCount(deliveredAtKill+2000, 90*time.Second) {
		t.Fatalf("second relay delivered fewer than 2000 more records within 90s (%d total)", c.Count())
	}
	// wall-clock: the second relay runs under load a while before the writer stops
	time.Sleep(2 * time.Second)
	stopWriter()
	committed := ledger.Committed()
	ok := c.WaitFor(committed, 2*time.Minute, 2*time.Second)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Second})
	msg := fmt.Sprintf("TestKill9MidStream: committed=%d delivered=%d duplicates=%d records=%d inversions=%d (killed at %d delivered / %d committed)",
		rep.Committed, rep.Delivered, rep.Duplicates, rep.Records, rep.Inversions, deliveredAtKill, committedAtKill)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived after the restart")
	}
	RequireOK(t, rep)
	if code, exited := r2.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want a clean exit 0", exited, code)
	}
}

// bulkInsert commits rows events in one transaction, over aggregates
// agg-0 … agg-(aggregates-1), versions increasing with the row number.
func (e *Env) bulkInsert(rows, aggregates int) {
	e.t.Helper()
	e.Exec(fmt.Sprintf(`insert into %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers)
		select gen_random_uuid(), $1, 'agg-' || (i %% %d), i, 'BulkImported', 1,
		       jsonb_build_object('aggregate_id', 'agg-' || (i %% %d), 'version', i, 'pad', repeat('x', 64)),
		       jsonb_build_object('trace_id', 'bulk-' || i)
		from generate_series(1, %d) as i`, e.QuotedTable(), aggregates, aggregates, rows), e.AggType)
}

// bulkExpected reads the table after bulkInsert: its rows events plus the
// canary, the bulk events stamped with committedAt.
func (e *Env) bulkExpected(rows int, committedAt time.Time) map[string]Event {
	e.t.Helper()
	expected := ExpectedFromTable(e.t, e.DB, e.QuotedTable())
	if len(expected) != rows+1 {
		e.t.Fatalf("table has %d rows, want %d", len(expected), rows+1)
	}
	for id, ev := range expected {
		if ev.AggregateID != "canary" {
			ev.CommitTime = committedAt
			expected[id] = ev
		}
	}
	return expected
}

func TestLargeTransaction(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	const rows = 200000
	env := NewEnv(t, EnvOptions{})
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(ledger), 60*time.Second)

	start := time.Now()
	env.bulkInsert(rows, 1000)
	committedAt := time.Now()
	commitLSN := env.CurrentInsertLSN()
	t.Logf("committed one transaction of %d rows in %s (LSN after commit %s)", rows, time.Since(start).Round(time.Millisecond), commitLSN)
	expected := env.bulkExpected(rows, committedAt)
	ok := c.WaitFor(expected, 6*time.Minute, 2*time.Second)
	elapsed := time.Since(start)
	confirmed := within(60*time.Second, 200*time.Millisecond, func() bool { return env.ConfirmedAtLeast(commitLSN) })
	peak := relay.PeakRSS()
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second})
	msg := fmt.Sprintf("TestLargeTransaction: rows=%d delivered=%d duplicates=%d elapsed=%s relay_peak_rss=%.1fMiB confirmed_passed_commit=%v",
		rows, rep.Delivered, rep.Duplicates, elapsed.Round(time.Millisecond), mib(peak), confirmed)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every row of the large transaction arrived")
	}
	RequireOK(t, rep)
	if peak >= 256<<20 {
		t.Errorf("relay peak RSS %.1f MiB, want < 256 MiB", mib(peak))
	}
	if !confirmed {
		t.Errorf("confirmed_flush_lsn %s did not pass the commit %s", env.SlotInfo().ConfirmedFlush, commitLSN)
	}
	if !relay.Running() {
		t.Fatalf("relay exited unexpectedly")
	}
}

func TestIdleOutboxAdvances(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	env := NewEnv(t, EnvOptions{})
	relay := env.StartRelay()
	if !env.WaitSlotActive(true, 30*time.Second) {
		t.Fatalf("slot never became active: %+v", env.SlotInfo())
	}
	other := "public.it_other_" + env.Sfx
	env.Exec(fmt.Sprintf(`create table %s (id bigserial primary key, v text not null, at timestamptz not null default now())`, other))
	before := env.SlotInfo().ConfirmedFlushLSN

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var mark string
	var samples []LSN
	start := time.Now()
	for i := 0; time.Since(start) < 10*time.Second; i++ {
		if _, err := env.DB.Exec(ctx, fmt.Sprintf(`insert into %s (v) select repeat('y', 200) from generate_series(1, 50)`, other)); err != nil {
			t.Fatalf("write other table: %v", err)
		}
		if mark == "" && time.Since(start) > 3*time.Second {
			mark = env.CurrentInsertLSN()
			t.Logf("mark LSN %s taken after %d writes to %s", mark, i+1, other)
		}
		if i%10 == 0 {
			samples = append(samples, env.ConfirmedFlush())
		}
		// wall-clock: paces the writes to the other table (every 100 ms for 10 s)
		time.Sleep(100 * time.Millisecond)
	}
	endWrites := env.CurrentInsertLSN()
	reached := within(20*time.Second, 200*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) })
	after := env.SlotInfo().ConfirmedFlushLSN
	distinct := 0
	for i := range samples {
		if i == 0 || samples[i] > samples[i-1] {
			distinct++
		}
	}
	msg := fmt.Sprintf("TestIdleOutboxAdvances: confirmed_flush_lsn %s -> %s (mark %s, end of writes %s, %d distinct values during writes), reached_mark=%v in %s",
		before, after, mark, endWrites, distinct, reached, time.Since(start).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
	if !reached {
		t.Fatalf("confirmed_flush_lsn %s did not pass %s within 20s while only a non-outbox table took writes", after, mark)
	}
	if !relay.Running() {
		t.Fatalf("relay exited unexpectedly")
	}
}
