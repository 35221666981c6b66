//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRecoverStreamsLikeRun: `recover` streams after its back-fill with
// run's whole set-up: the Kafka security line, --max-procs applied (the
// "Go scheduler" line) and the leader's cleanup schedule running
// (--cleanup-older-than), not a bare relay.
func TestRecoverStreamsLikeRun(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{Partitions: 3})
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	write := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if _, err := w.Write(ctx, []string{fmt.Sprintf("%s-%d", prefix, i%3)}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("before", 10)
	// The slot migrate made is gone: recover recreates it and back-fills.
	env.Exec(`select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1`, env.Slot)

	r := StartCommand(t, processEnv(env.BaseEnv(), []string{"OUTBOX_RELAY_HEARTBEAT_INTERVAL=1s", "OUTBOX_RELAY_METRICS_ADDR=",
		"OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms"}),
		"recover", "--all", "--max-procs", "1", "--cleanup-older-than", "1h", "--cleanup-interval", "300ms")
	if !within(60*time.Second, 100*time.Millisecond, func() bool { return r.LogContains(`"message":"streaming"`) || !r.Running() }) || !r.Running() {
		t.Fatalf("recover not streaming within 60s; tail:\n%s", r.LogTail(30))
	}
	write("after", 5)
	if !c.WaitFor(ledger.Committed(), 30*time.Second, 0) {
		t.Fatalf("events not delivered by recover; tail:\n%s", r.LogTail(20))
	}
	for _, want := range []string{`"message":"Go scheduler"`, `"gomaxprocs":1`, `"message":"kafka connection security"`} {
		if !r.LogContains(want) {
			t.Errorf("recover's log lacks run's set-up line %s", want)
		}
	}
	if !within(10*time.Second, 100*time.Millisecond, func() bool {
		return r.LogContains(`"message":"cleanup run"`) || r.LogContains(`"message":"cleanup refused"`)
	}) {
		t.Errorf("recover ran no cleanup within 10s with --cleanup-interval 300ms; tail:\n%s", r.LogTail(20))
	}
	t.Logf("recover set-up: %v %v", r.LogLines("Go scheduler", 1), r.LogLines(`"stage":"cleanup"`, 1))
	if code, exited := r.Term(20 * time.Second); !exited || code != 0 {
		t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
	}
}
