//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// TestCheckpointPartialRoundTrip: migration 5's partial columns are
// written and read back by the checkpoint store, and a checkpoint saved
// without a partial clears the row's (a stale partial must never be
// applied after its transaction was confirmed).
func TestCheckpointPartialRoundTrip(t *testing.T) {
	inSuites(t, exclusive, stack)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	tbl, err := migrations.ParseTable(env.Table)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st := checkpoint.NewStore(env.DB, tbl, env.Slot)
	if err := st.Check(ctx); err != nil {
		t.Fatalf("check: %v", err)
	}
	id := checkpoint.Identity{SystemID: "7", Timeline: 1}
	save := func(lsn pglogrepl.LSN, p checkpoint.Partial) checkpoint.Checkpoint {
		t.Helper()
		if err := st.Save(ctx, checkpoint.Checkpoint{LSN: lsn, Identity: id, Partial: p}, 0); err != nil {
			t.Fatalf("save: %v", err)
		}
		cp, err := st.Latest(ctx)
		if err != nil {
			t.Fatalf("latest: %v", err)
		}
		return cp
	}
	want := checkpoint.Partial{CommitLSN: 0x1_0000_0200, Events: 75242, Acked: []byte{0, 0b1010, 0xff}}
	if cp := save(0x1_0000_0100, want); !cp.Partial.Equal(want) || cp.LSN != 0x1_0000_0100 {
		t.Fatalf("inserted row reads back %+v / %s, want %+v", cp.Partial, cp.LSN, want)
	}
	want.Events, want.Acked = 80000, nil
	if cp := save(0x1_0000_0100, want); !cp.Partial.Equal(want) {
		t.Fatalf("updated row reads back %+v, want %+v", cp.Partial, want)
	}
	if cp := save(0x1_0000_0300, checkpoint.Partial{}); !cp.Partial.Empty() {
		t.Fatalf("a save without a partial left %+v", cp.Partial)
	}

	// Check refuses a table without migration 5's columns.
	env.Exec(`alter table public.outbox_relay_checkpoint rename column partial_events to partial_events_` + env.Sfx)
	defer env.Exec(`alter table public.outbox_relay_checkpoint rename column partial_events_` + env.Sfx + ` to partial_events`)
	if err := st.Check(ctx); err == nil || !strings.Contains(err.Error(), "partial_events") || !strings.Contains(err.Error(), "migrate") {
		t.Fatalf("check without the columns: %v, want an error naming them and migrate", err)
	}
}

// TestLargeTransactionKillResend commits one 100,000-row transaction over
// 50 aggregates, kills the relay with SIGKILL while it is delivering it,
// and restarts it. The checkpoint's partial (the acknowledged prefix of
// the transaction) lets the restart skip what Kafka has, so the
// duplicates stay within the in-flight window plus one batch per
// partition, instead of most of the transaction (75,242 were measured
// before the fix).
func TestLargeTransactionKillResend(t *testing.T) {
	inSuites(t, parallel, stack)
	const (
		rows     = 100000
		inflight = 5000
		batch    = 500
	)
	env := NewEnv(t, EnvOptions{})
	relayEnv := []string{
		fmt.Sprintf("OUTBOX_RELAY_MAX_INFLIGHT_EVENTS=%d", inflight),
		fmt.Sprintf("OUTBOX_RELAY_MAX_BATCH=%d", batch),
	}
	r1 := env.StartRelay(relayEnv...)
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(ledger), 60*time.Second)
	base := c.Count()

	env.bulkInsert(rows, 50)
	committedAt := time.Now()
	commitLSN := env.CurrentInsertLSN()

	// Kill once at least 20% arrived, well before the end.
	if !within(5*time.Minute, 10*time.Millisecond, func() bool { return c.Count()-base >= rows/5 }) {
		t.Fatalf("fewer than %d records within 5 min (got %d)\n%s", rows/5, c.Count()-base, r1.LogTail(20))
	}
	r1.Kill9()
	atKill := c.Count() - base
	if atKill >= rows {
		t.Fatalf("the whole transaction (%d records) was delivered before the kill: nothing measured", atKill)
	}
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active after kill -9: %+v", env.SlotInfo())
	}
	time.Sleep(time.Second) // wall-clock: records written before the kill reach the consumer
	atRestart := c.Count() - base
	t.Logf("killed with %d of %d records delivered (%d by the restart); slot %s, transaction commits before %s",
		atKill, rows, atRestart, env.SlotInfo().ConfirmedFlush, commitLSN)

	r2 := env.StartRelay(relayEnv...)
	expected := env.bulkExpected(rows, committedAt)
	ok := c.WaitFor(expected, 5*time.Minute, 2*time.Second)
	rep := c.Check(expected, CheckOptions{})
	skipped, _ := logField(r2, "restarting inside a partly acknowledged transaction", "skipped_events")
	bound := inflight + env.Partitions*batch
	msg := fmt.Sprintf("TestLargeTransactionKillResend: rows=%d delivered_at_kill=%d skipped_on_restart=%.0f lost=%d inversions=%d duplicates=%d (bound %d = --max-inflight-events %d + %d partitions x --max-batch %d)",
		rows, atRestart, skipped, len(rep.Lost), rep.Inversions, rep.Duplicates, bound, inflight, env.Partitions, batch)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every row arrived after the restart")
	}
	RequireOK(t, rep)
	if rep.Duplicates > bound {
		t.Errorf("duplicates %d over the bound %d\n%s", rep.Duplicates, bound, r2.LogTail(30))
	}
	if code, exited := r2.Term(30 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
}

// TestLargeTransactionRepeatedKills kills the relay with SIGKILL three
// times inside one 100,000-row transaction, beside a steady small load, at
// the default window: each restart must save its own progress through the
// transaction (not only what the first process saved), so each restart
// re-sends at most about the window, and the three together at most one
// window per crash. Before the fix a second restart re-sent everything the
// first restart had delivered (about 85,000 events were measured).
func TestLargeTransactionRepeatedKills(t *testing.T) {
	inSuites(t, parallel, stack)
	const (
		rows   = 100000
		kills  = 3
		window = 10000 // the default --max-inflight-events
		batch  = 1000  // the default --max-batch
	)
	env := NewEnv(t, EnvOptions{})
	r := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(ledger), 60*time.Second)
	stopWriter := backgroundWriter(t, env.NewWriter(ledger), 26, 20*time.Millisecond)
	defer stopWriter()

	env.bulkInsert(rows, 50)
	bound := window + env.Partitions*batch
	distinct0, _ := c.Seen()
	// Kill 1 once 8,000 events of the transaction arrived; each later
	// kill once the restart delivered 12,000 more distinct events, so every
	// process made progress of its own past what the one before it saved.
	progress := []int{8000, 12000, 12000}
	perRestart := make([]int, 0, kills+1)
	skipped := make([]float64, 0, kills)
	_, dupsAtStart := c.Seen()
	for k := 0; k < kills; k++ {
		from, _ := c.Seen()
		if !within(5*time.Minute, 20*time.Millisecond, func() bool { d, _ := c.Seen(); return d-from >= progress[k] }) {
			d, _ := c.Seen()
			t.Fatalf("kill %d: only %d new events within 5 min\n%s", k+1, d-from, r.LogTail(30))
		}
		r.Kill9()
		if !env.WaitSlotActive(false, 30*time.Second) {
			t.Fatalf("slot still active after kill -9: %+v", env.SlotInfo())
		}
		time.Sleep(time.Second) // wall-clock: records written before the kill reach the consumer
		d, dups := c.Seen()
		if d-distinct0 >= rows {
			t.Fatalf("kill %d: the whole transaction was delivered before it: nothing measured", k+1)
		}
		if k > 0 {
			n, _ := logField(r, "restarting inside a partly acknowledged transaction", "skipped_events")
			skipped = append(skipped, n)
		}
		perRestart = append(perRestart, dups-dupsAtStart)
		dupsAtStart = dups
		t.Logf("kill %d with %d distinct events delivered; %d duplicates since the previous start", k+1, d-distinct0, perRestart[k])
		r = env.StartRelay()
	}
	stopWriter()
	expected := ExpectedFromTable(t, env.DB, env.QuotedTable())
	ok := c.WaitFor(expected, 5*time.Minute, 2*time.Second)
	n, _ := logField(r, "restarting inside a partly acknowledged transaction", "skipped_events")
	skipped = append(skipped, n)
	_, dups := c.Seen()
	perRestart = append(perRestart, dups-dupsAtStart)
	rep := c.Check(expected, CheckOptions{})
	// perRestart[0] is before any restart (the first process): zero.
	msg := fmt.Sprintf("TestLargeTransactionRepeatedKills: rows=%d kills=%d window=%d skipped_per_restart=%v duplicates_per_restart=%v total_duplicates=%d lost=%d inversions=%d (bound per restart %d = window + %d partitions x batch %d)",
		rows, kills, window, skipped, perRestart[1:], rep.Duplicates, len(rep.Lost), rep.Inversions, bound, env.Partitions, batch)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every event arrived after the last restart")
	}
	RequireOK(t, rep)
	for i, d := range perRestart[1:] {
		if d > bound {
			t.Errorf("restart %d re-sent %d duplicates, over the bound %d", i+1, d, bound)
		}
	}
	if rep.Duplicates > kills*bound {
		t.Errorf("%d duplicates over %d kills: over one bound (%d) per crash", rep.Duplicates, kills, bound)
	}
	if code, exited := r.Term(30 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
}

// TestLargeTransactionSmallWindow: with a window smaller than the save
// kick used to be (128 events), held acknowledgements filled the window
// before any save was asked for, and only the checkpoint interval's
// ticker released it: a large transaction crawled at one window per
// second (20,000 rows: about 400 s), unreported. The kick now comes at
// half the window at the latest.
func TestLargeTransactionSmallWindow(t *testing.T) {
	inSuites(t, parallel, stack)
	const (
		rows   = 20000
		window = 50
	)
	env := NewEnv(t, EnvOptions{})
	r := env.StartRelay(fmt.Sprintf("OUTBOX_RELAY_MAX_INFLIGHT_EVENTS=%d", window))
	c := StartConsumer(t, env.Topic, env.Partitions)
	waitCaughtUp(t, env, c, env.NewWriter(NewLedger()), 60*time.Second)
	start := time.Now()
	env.bulkInsert(rows, 50)
	expected := env.bulkExpected(rows, time.Now())
	ok := c.WaitFor(expected, 2*time.Minute, time.Second)
	elapsed := time.Since(start)
	rep := c.Check(expected, CheckOptions{})
	msg := fmt.Sprintf("TestLargeTransactionSmallWindow: rows=%d window=%d elapsed=%s events_per_s=%.0f lost=%d duplicates=%d",
		rows, window, elapsed.Round(time.Millisecond), float64(rows)/elapsed.Seconds(), len(rep.Lost), rep.Duplicates)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Fatalf("a %d-row transaction with a window of %d was not delivered within 2 min (it crawls at a window per checkpoint interval)\n%s",
			rows, window, r.LogTail(20))
	}
	RequireOK(t, rep)
	if r.LogContains("delivery stalled") {
		t.Errorf("a stall was reported while the transaction moved\n%s", r.LogTail(20))
	}
}

// TestCheckpointTableLocked locks the checkpoint table from another
// session (as an open transaction of `checkpoint reset` or an ALTER TABLE
// would) while the relay delivers a large transaction. Without a bound on
// the save, the held acknowledgements filled the window and the stream
// stopped with nothing in flight, reported nowhere. Each save now times
// out (5 s): the hold is released with a warning and a metric and the
// stream keeps moving; nothing is lost.
func TestCheckpointTableLocked(t *testing.T) {
	inSuites(t, exclusive, stack)
	const (
		rows    = 100000
		window  = 10000 // the default --max-inflight-events
		lockFor = 12 * time.Second
	)
	env := NewEnv(t, EnvOptions{})
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r := env.StartRelay("OUTBOX_RELAY_METRICS_ADDR=" + addr)
	c := StartConsumer(t, env.Topic, env.Partitions)
	waitCaughtUp(t, env, c, env.NewWriter(NewLedger()), 60*time.Second)
	base, _ := c.Seen()

	env.bulkInsert(rows, 50)
	committedAt := time.Now()
	if !within(2*time.Minute, 10*time.Millisecond, func() bool { d, _ := c.Seen(); return d-base >= 3000 }) {
		t.Fatalf("the transaction did not start arriving\n%s", r.LogTail(20))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := env.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `lock table public.outbox_relay_checkpoint in access exclusive mode`); err != nil {
		t.Fatalf("lock: %v", err)
	}
	atLock, _ := c.Seen()
	// wall-clock: the lock's hold time (past the 5 s save timeout)
	time.Sleep(lockFor)
	atUnlock, _ := c.Seen()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	moved := atUnlock - atLock
	expected := env.bulkExpected(rows, committedAt)
	ok := c.WaitFor(expected, 3*time.Minute, time.Second)
	rep := c.Check(expected, CheckOptions{})
	failures := metricValue(t, addr, "outbox_relay_checkpoint_save_failures_total")
	msg := fmt.Sprintf("TestCheckpointTableLocked: rows=%d locked_for=%s delivered_while_locked=%d (before the lock %d) save_failures=%.0f lost=%d duplicates=%d stall_reported=%v",
		rows, lockFor, moved, atLock-base, failures, len(rep.Lost), rep.Duplicates, r.LogContains("delivery stalled"))
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every event arrived after the lock")
	}
	RequireOK(t, rep)
	if atLock-base >= rows {
		t.Fatalf("the whole transaction arrived before the lock: nothing measured")
	}
	if moved < window && !r.LogContains("delivery stalled") {
		t.Errorf("the stream delivered %d events in %s of a locked checkpoint table and no stall was reported\n%s", moved, lockFor, r.LogTail(20))
	}
	if !r.LogContains("checkpoint save timed out") || !r.LogContains("released without it") || failures < 1 {
		t.Errorf("the timed-out saves were not reported (save_failures=%v)\n%s", failures, r.LogTail(20))
	}
	if code, exited := r.Term(30 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
}
