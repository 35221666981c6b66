//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestToolsNeverWriteThePositionsTopic: with the template
// "{aggregate_type}", an outbox row whose aggregate_type names the
// positions topic (the relay's --positions-topic, or the default
// __outbox_relay_positions) would be a forged position record. The relay
// dead-letters such rows (TestReservedTopicsAreDeadLettered); replay, dlq
// retry and recover's back-fill build their publishers the way the relay
// does (issue 47), so none of them writes one either: replay and dlq retry
// refuse the event, recover's back-fill dead-letters it, and the custom
// positions topic, created beforehand, stays empty. Before, each of them
// published it ("1/1 events acknowledged").
func TestToolsNeverWriteThePositionsTopic(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	positions := "it." + env.Sfx + ".positions"
	env.CreateTopic(ctx, positions, 1)
	settings := []string{"OUTBOX_RELAY_TOPIC_TEMPLATE={aggregate_type}", "OUTBOX_RELAY_POSITIONS_TOPIC=" + positions}
	empty := func(after string) {
		t.Helper()
		if n := kfHighWatermark(t, ctx, positions); n != 0 {
			t.Fatalf("after %s: the positions topic %s holds %d records, want none", after, positions, n)
		}
	}
	// forge commits one row routed to topic, for a new aggregate.
	forge := func(id, topic string) {
		t.Helper()
		w := env.NewWriter(NewLedger())
		w.AggregateType = topic
		if _, err := w.Write(ctx, []string{id}, true); err != nil {
			t.Fatal(err)
		}
	}
	forge("forged-custom", positions)
	forge("forged-default", "__outbox_relay_positions")

	// Before the relay quarantined their aggregates, which replay leaves
	// out.
	var res CLIResult
	for agg, why := range map[string]string{"forged-custom": "is the relay's positions topic", "forged-default": `begins with "__"`} {
		res = env.RunCLI(60*time.Second, settings, "replay", "--all", "--aggregate", agg)
		if res.Code == 0 || !strings.Contains(res.Stderr+res.Stdout, why) {
			t.Fatalf("replay --all --aggregate %s: exit %d, want a refusal saying the topic %s\n%s\n%s", agg, res.Code, why, res.Stdout, tail(res.Stderr, 20))
		}
		empty("replay --all --aggregate " + agg)
	}

	// The relay dead-letters both: the rows dlq retry works on.
	relay := env.StartRelay(settings...)
	rows := waitDL(t, env, "", 30*time.Second, "both forged events dead-lettered", func(r []dlRow) bool { return len(r) >= 2 })
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d", exited, code)
	}
	empty("the relay")

	for _, r := range rows {
		res = env.RunCLI(60*time.Second, settings, "dlq", "retry", r.EventID, "--wait", "0")
		if res.Code == 0 || !strings.Contains(res.Stdout+res.Stderr, "no event may be written there") {
			t.Fatalf("dlq retry %s (topic %s): exit %d, want a refusal\n%s\n%s", r.EventID, r.Topic, res.Code, res.Stdout, tail(res.Stderr, 20))
		}
	}
	empty("dlq retry")
	if got := waitDL(t, env, "", time.Second, "the forged events still dead", func(r []dlRow) bool { return len(r) >= 2 }); !allDead(got) {
		t.Fatalf("after dlq retry: %v, want both still dead", got)
	}

	// recover's back-fill: a forged row the relay never saw, past the
	// checkpoint, on a dropped slot.
	forge("forged-recover", positions)
	env.Exec(`select pg_drop_replication_slot($1)`, env.Slot)
	res = env.RunCLI(90*time.Second, settings, "recover", "--all", "--no-run")
	if res.Code != 0 {
		t.Fatalf("recover --all --no-run: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 30))
	}
	empty("recover's back-fill")
	got := waitDL(t, env, "forged-recover", 10*time.Second, "recover's forged event dead-lettered", func(r []dlRow) bool { return len(r) == 1 })
	if r := got[0]; r.Topic != positions || !strings.Contains(r.Reason, "reserved_topic") {
		t.Fatalf("recover's dead letter %s: want topic %s, reason reserved_topic", fmt.Sprint(r), positions)
	}
}

// allDead reports whether every row is still dead.
func allDead(rows []dlRow) bool {
	for _, r := range rows {
		if r.Status != "dead" {
			return false
		}
	}
	return true
}
