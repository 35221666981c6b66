//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestRecoverLostSlot drops the slot while events are pending and more are
// being written, checks that run refuses the missing slot, runs recover
// (back-fill from the table, new slot) and checks that every committed
// event arrived, counting duplicates.
func TestRecoverLostSlot(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	env := NewEnv(t, EnvOptions{})
	r1 := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms")
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	stopWriter := backgroundWriter(t, env.NewWriter(ledger), 13, 3*time.Millisecond)
	defer stopWriter()
	if !c.WaitCount(1000, 60*time.Second) {
		t.Fatalf("fewer than 1000 records within 60s")
	}
	r1.Kill9()
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active after kill -9")
	}
	time.Sleep(time.Second) // wall-clock: the relay stays down: events pile up, pending in the slot
	env.Exec(`select pg_drop_replication_slot($1)`, env.Slot)
	pendingAtDrop := ledger.CommittedCount() - c.Count()
	t.Logf("slot dropped with about %d events pending; writer continues", pendingAtDrop)
	// wall-clock: the relay stays down: the writer continues past the drop, into the gap
	time.Sleep(time.Second)

	// run must not silently create a fresh slot past the gap.
	r2 := env.StartRelay()
	if code, exited := r2.Wait(30 * time.Second); !exited || code != 1 || !r2.LogContains("outbox-relay recover") {
		t.Fatalf("run on a dropped slot: exited=%v code=%d, want exit 1 naming recover\n%s", exited, code, r2.LogTail(10))
	}

	res := env.RunCLI(90*time.Second, nil, "recover", "--no-run")
	t.Logf("recover: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 || !strings.Contains(res.Stdout, "back-filled") {
		t.Fatalf("recover: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 30))
	}
	r3 := env.StartRelay()
	// wall-clock: the recovered relay runs under load a while before the writer stops
	time.Sleep(2 * time.Second)
	stopWriter()
	committed := ledger.Committed()
	ok := c.WaitFor(committed, 60*time.Second, 2*time.Second)
	rep := c.Check(committed, CheckOptions{})
	replayed := 0
	for _, rec := range c.Records() {
		if rec.Headers["outbox_replay"] == "recover" {
			replayed++
		}
	}
	msg := fmt.Sprintf("TestRecoverLostSlot: committed=%d delivered=%d lost=%d duplicates=%d backfilled_records=%d pending_at_drop~%d inversions=%d",
		rep.Committed, rep.Delivered, len(rep.Lost), rep.Duplicates, replayed, pendingAtDrop, rep.Inversions)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every committed event arrived after recover")
	}
	RequireOK(t, rep)
	if replayed == 0 {
		t.Fatalf("recover back-filled nothing")
	}
	if code, exited := r3.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
}
