//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestReplay: --dry-run publishes nothing; --from-checkpoint beside a
// running relay re-publishes (marked) at least every event committed after
// the checkpoint, per aggregate in order; --aggregate filters.
func TestReplay(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	r := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms")
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	wr := env.NewWriter(ledger)
	ctx := context.Background()
	write := func(n int) {
		for i := 0; i < n; i++ {
			if _, err := wr.Write(ctx, []string{aggName(i % 20), aggName((i + 7) % 20)}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(100)
	if !c.WaitFor(ledger.Committed(), 30*time.Second, 0) {
		t.Fatal("first events not delivered")
	}
	time.Sleep(time.Second) // wall-clock: a periodic checkpoint saves a fence past them
	before := ledger.Committed()
	startLSN := env.SlotInfo().ConfirmedFlush // past the first 100 transactions
	write(100)
	all := ledger.Committed()
	after := map[string]Event{}
	for id, e := range all {
		if _, ok := before[id]; !ok {
			after[id] = e
		}
	}
	if !c.WaitFor(all, 30*time.Second, 500*time.Millisecond) {
		t.Fatal("events not delivered")
	}
	res := env.RunCLI(30*time.Second, nil, "replay", "--from-checkpoint", "--dry-run")
	if res.Code != 0 || !strings.Contains(res.Stdout, "dry run") {
		t.Fatalf("dry run: exit %d\n%s\n%s", res.Code, res.Stdout, res.Stderr)
	}
	n0 := c.Count()
	// wall-clock: a negative window: a dry run publishes nothing
	time.Sleep(time.Second)
	if c.Count() != n0 {
		t.Fatalf("dry run published %d records", c.Count()-n0)
	}
	cpRes := env.RunCLI(30*time.Second, nil, "checkpoint", "show")
	t.Logf("checkpoint: %s", cpRes.Stdout)

	res = env.RunCLI(60*time.Second, nil, "replay", "--from-lsn", startLSN)
	t.Logf("replay: %s", res.Stdout)
	if res.Code != 0 || !strings.Contains(res.Stdout, "replayed") {
		t.Fatalf("replay: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	// wall-clock: the replayed records reach the consumer before the count
	time.Sleep(2 * time.Second)
	firstReplayEnd := c.Count()
	res = env.RunCLI(60*time.Second, nil, "replay", "--all", "--aggregate", aggName(3))
	if res.Code != 0 {
		t.Fatalf("replay --aggregate: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	// wall-clock: the replayed records reach the consumer before the check
	time.Sleep(2 * time.Second)
	var marked, second []Record
	for i, rec := range c.Records() {
		if rec.Headers["outbox_replay"] == "replay" {
			marked = append(marked, rec)
			if i >= firstReplayEnd {
				second = append(second, rec)
			}
		}
	}
	// Each replay alone is in order per aggregate.
	rep := CheckRecords(marked[:len(marked)-len(second)], env.Partitions, all, CheckOptions{})
	if rep2 := CheckRecords(second, env.Partitions, all, CheckOptions{}); rep2.Inversions != 0 || rep2.Delivered != 20 || len(second) != 20 {
		t.Fatalf("replay --aggregate: %d records, want the 20 events of %s in order: %s", len(second), aggName(3), rep2)
	}
	agg3 := 0
	for _, e := range all {
		if e.AggregateID == aggName(3) {
			agg3++
		}
	}
	msg := fmt.Sprintf("TestReplay: committed=%d replayed_records=%d agg3_events=%d inversions_among_replayed=%d", len(all), len(marked), agg3, rep.Inversions)
	t.Log(msg)
	fmt.Println(msg)
	if rep.Inversions != 0 || len(rep.Problems) != 0 {
		t.Fatalf("replayed records: %s", rep)
	}
	seen := map[string]bool{}
	for _, rec := range marked {
		seen[rec.EventID()] = true
	}
	for id := range after {
		if !seen[id] {
			t.Fatalf("event %s committed after the start position was not replayed", id)
		}
	}
	if code, exited := r.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("relay beside replay: exited=%v code=%d", exited, code)
	}
	RequireOK(t, c.Check(all, CheckOptions{}))
}
