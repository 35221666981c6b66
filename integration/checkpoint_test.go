//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// checkpointRow is the newest row of outbox_relay_checkpoint for the env.
func (e *Env) checkpointLSN(t testing.TB) (LSN, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	err := e.DB.QueryRow(ctx, `select lsn::text from public.outbox_relay_checkpoint
		where outbox_table = $1 and slot = $2 order by id desc limit 1`, e.Table, e.Slot).Scan(&s)
	if err != nil {
		return 0, false
	}
	l, err := ParseLSN(s)
	if err != nil {
		t.Fatalf("checkpoint lsn %q: %v", s, err)
	}
	return l, true
}

// backgroundWriter writes 5-event transactions over 200 aggregates until
// stopped; stop waits for it and fails the test on a write error.
func backgroundWriter(t *testing.T, wr *Writer, seed int64, pause time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var halt atomic.Bool
	werr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewSource(seed))
		for !halt.Load() {
			ids := make([]string, 5)
			for i := range ids {
				ids[i] = aggName(rng.Intn(200))
			}
			if _, err := wr.Write(ctx, ids, true); err != nil {
				werr <- err
				return
			}
			// wall-clock: paces the load writer (a transaction per pause)
			time.Sleep(pause)
		}
		werr <- nil
	}()
	var done atomic.Bool
	return func() {
		if done.Swap(true) {
			return
		}
		halt.Store(true)
		err := <-werr
		cancel()
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
}

// logField returns the numeric field of the first JSON log line containing msg.
func logField(r *Relay, msg, field string) (float64, bool) {
	for _, line := range r.LogLines(msg, 1) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil {
			if v, ok := m[field].(float64); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// TestCheckpointSkipAhead kills the relay while its checkpoint is ahead of
// the slot's confirmed_flush_lsn, and measures the duplicates the restarted
// relay avoids by skipping what the checkpoint shows Kafka acknowledged.
//
// In production the window is short: the relay confirms the slot within
// ~100 ms of the acknowledgements, so a kill -9 lands in it rarely; the
// common case is a PostgreSQL crash, after which confirmed_flush_lsn falls
// back to its last on-disk value. The test widens the window with the
// OUTBOX_RELAY_TEST_STATUS_HOLD hook (status updates confirm only positions
// acknowledged 4 s earlier; checkpoints are saved every 200 ms).
func TestCheckpointSkipAhead(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	r1 := env.StartRelay("OUTBOX_RELAY_TEST_STATUS_HOLD=4s", "OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms")
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	stopWriter := backgroundWriter(t, env.NewWriter(ledger), 11, 3*time.Millisecond)
	defer stopWriter()

	if !c.WaitCount(1500, 60*time.Second) {
		t.Fatalf("fewer than 1500 records within 60s (got %d)", c.Count())
	}
	time.Sleep(5 * time.Second) // wall-clock: by design the held status lags the acknowledgements by ~4 s
	r1.Kill9()
	deliveredAtKill := c.Count()
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active after kill -9: %+v", env.SlotInfo())
	}
	cp, ok := env.checkpointLSN(t)
	if !ok {
		t.Fatal("no checkpoint saved")
	}
	confirmed := env.SlotInfo().ConfirmedFlushLSN
	t.Logf("at kill: delivered=%d checkpoint=%s confirmed_flush_lsn=%s (checkpoint ahead by %d bytes)",
		deliveredAtKill, cp, confirmed, int64(cp)-int64(confirmed))
	if cp <= confirmed {
		t.Fatalf("checkpoint %s not ahead of the slot %s: the window was not constructed", cp, confirmed)
	}

	r2 := env.StartRelay()
	if !c.WaitCount(deliveredAtKill+1000, 60*time.Second) {
		t.Fatalf("second relay delivered fewer than 1000 more records within 60s")
	}
	stopWriter()
	committed := ledger.Committed()
	ok = c.WaitFor(committed, 60*time.Second, 2*time.Second)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Second})
	skipped, found := logField(r2, "caught up with the checkpoint", "skipped_events")
	msg := fmt.Sprintf("TestCheckpointSkipAhead: committed=%d delivered=%d lost=%d duplicates=%d skipped(duplicates avoided)=%.0f checkpoint_ahead_bytes=%d",
		rep.Committed, rep.Delivered, len(rep.Lost), rep.Duplicates, skipped, int64(cp)-int64(confirmed))
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
	if !found || skipped <= 0 {
		t.Fatalf("restarted relay skipped nothing (log line found=%v)\n%s", found, r2.LogTail(30))
	}
	// Without the skip every skipped event would have been one more duplicate.
	if float64(rep.Duplicates) >= skipped {
		t.Fatalf("duplicates %d not below the %0.f events skipped", rep.Duplicates, skipped)
	}
	if code, exited := r2.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
	res := env.RunCLI(20*time.Second, nil, "checkpoint", "show")
	if res.Code != 0 || !strings.Contains(res.Stdout, `"usable": true`) {
		t.Fatalf("checkpoint show: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
}

// TestCheckpointOtherSystemRefused: a checkpoint saved on another cluster
// (or timeline) is refused with a clear error, never applied.
func TestCheckpointOtherSystemRefused(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	for _, tc := range []struct{ name, set, want string }{
		{"system", `system_identifier = '42'`, "another system identifier"},
		{"timeline", `timeline = timeline + 7`, "another timeline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env.Exec(`delete from public.outbox_relay_checkpoint where outbox_table = $1 and slot = $2`, env.Table, env.Slot)
			r := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=100ms")
			if !within(20*time.Second, 100*time.Millisecond, func() bool { _, ok := env.checkpointLSN(t); return ok }) {
				t.Fatalf("no checkpoint saved\n%s", r.LogTail(20))
			}
			r.Term(20 * time.Second)
			env.WaitSlotActive(false, 20*time.Second)
			env.Exec(`update public.outbox_relay_checkpoint set `+tc.set+` where outbox_table = $1 and slot = $2`, env.Table, env.Slot)
			r2 := env.StartRelay()
			code, exited := r2.Wait(30 * time.Second)
			if !exited || code != 1 {
				t.Fatalf("relay with a foreign checkpoint: exited=%v code=%d, want exit 1\n%s", exited, code, r2.LogTail(20))
			}
			if !r2.LogContains(tc.want) || !r2.LogContains("refused") {
				t.Fatalf("error does not say %q / refused:\n%s", tc.want, r2.LogTail(20))
			}
			res := env.RunCLI(20*time.Second, nil, "checkpoint", "show")
			if res.Code != 0 || !strings.Contains(res.Stdout, `"usable": false`) {
				t.Fatalf("checkpoint show: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
			}
		})
	}
}
