//go:build integration

package integration

// TestLeaderCut: network cuts of the leader, as across a partition that
// drops packets: nothing passes in either direction and nothing is reset
// (the proxies' blackhole), under steady load, with a standby beside it.
//
//  1. The leader is cut off PostgreSQL (its lock session, pool and
//     replication stream), on the default settings. A black-box run saw
//     delivery stop for 61 s: the standby took the lock after about 11 s,
//     then waited for the server's wal_sender_timeout (60 s) to end the
//     former leader's walsender. Now the new leader ends it (relay/
//     takeover.go), and the first event committed after the cut must
//     arrive within --leader-timeout + 2 s.
//  2. The leader is cut off Kafka only: its lock holds, so there is no
//     takeover (the standby stays standby), its readiness fails (it
//     reports the stall), and on heal delivery resumes with no duplicate:
//     the stream was not restarted, and the idempotent producer's retries
//     are deduplicated by the broker.
//
// Nothing may be lost or reordered per aggregate; duplicates of part 1
// (what the former leader had published but not confirmed) are counted.
//
// Exclusive: the takeover bound is timing that other tests' load upsets,
// and part 2 uses the broker's one proxied listener (StartKafkaProxy).

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// cutNode starts a relay on env's slot whose PostgreSQL connections go
// through a proxy of its own; extra overrides the environment (the
// defaults otherwise, but for the metrics address and the log level).
func cutNode(t *testing.T, env *Env, name string, extra ...string) *relayNode {
	t.Helper()
	proxy, url := StartPGProxy(t)
	n := &relayNode{name: name, proxy: proxy, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	n.r = env.StartRelay(append([]string{
		"OUTBOX_RELAY_DATABASE_URL=" + url,
		"OUTBOX_RELAY_METRICS_ADDR=" + n.addr,
		"OUTBOX_RELAY_LOG_LEVEL=info",
	}, extra...)...)
	return n
}

// firstAfter is how long after t0 the first record of an event committed
// after t0 was read: when delivery resumed.
func firstAfter(c *Consumer, committed map[string]Event, t0 time.Time) (time.Duration, bool) {
	var first time.Time
	for _, r := range c.Records() {
		ev, ok := committed[r.EventID()]
		if !ok || !ev.CommitTime.After(t0) {
			continue
		}
		if first.IsZero() || r.Seen.Before(first) {
			first = r.Seen
		}
	}
	return first.Sub(t0), !first.IsZero()
}

func TestLeaderCut(t *testing.T) {
	inSuites(t, exclusive, stack)
	requireRelay(t)
	const (
		leaderTimeout = 10 * time.Second // --leader-timeout's default
		// Longer than the bound, shorter than the server's wal_sender_timeout (60 s): the
		// standby must lead before the server would end the old walsender by itself.
		cutHold  = 15 * time.Second
		kafkaCut = 12 * time.Second
		// --stall-timeout of part 2's relays, so /readyz reports the stall within the cut; the
		// default (1m) would take longer than the cut. It plays no part in leadership.
		stallTimeout = 4 * time.Second
	)
	env := NewEnv(t, EnvOptions{})
	c := StartConsumer(t, env.Topic, env.Partitions)
	w := env.NewWriter(NewLedger())
	stopLoad := steadyLoad(t, w)
	defer stopLoad()
	flowing := func(what string) {
		t.Helper()
		n := c.Count()
		if !c.WaitCount(n+200, 30*time.Second) {
			t.Fatalf("%s: fewer than 200 more records within 30s (%d)", what, c.Count())
		}
	}

	// 1. The leader cut off PostgreSQL, on the defaults.
	n1 := cutNode(t, env, "relay-1")
	if !within(30*time.Second, 50*time.Millisecond, n1.streamingLeader) {
		t.Fatalf("relay-1 is not a streaming leader within 30s:\n%s", n1.r.LogTail(20))
	}
	n2 := cutNode(t, env, "relay-2")
	if !within(30*time.Second, 50*time.Millisecond, n2.readyStandby) {
		t.Fatalf("relay-2 is not a ready standby within 30s:\n%s", n2.r.LogTail(20))
	}
	flowing("before the cut")
	t0 := time.Now()
	n1.proxy.Blackhole(cutHold + 10*time.Second)
	if !within(cutHold, 20*time.Millisecond, n2.streamingLeader) {
		t.Fatalf("relay-2 did not lead within %s of the cut:\nrelay-2:\n%s\nrelay-1:\n%s", cutHold, n2.r.LogTail(30), n1.r.LogTail(20))
	}
	led := time.Since(t0)
	var resumed time.Duration
	if !within(20*time.Second, 20*time.Millisecond, func() bool {
		var ok bool
		resumed, ok = firstAfter(c, w.Ledger.Committed(), t0)
		return ok
	}) {
		t.Fatalf("no event committed after the cut arrived within 20s of the new leader's start:\n%s", n2.r.LogTail(30))
	}
	bound := leaderTimeout + 2*time.Second
	t.Logf("PostgreSQL cut: relay-2 streams %s after the cut, the first event committed after it arrives after %s (bound %s)",
		led.Round(time.Millisecond), resumed.Round(time.Millisecond), bound)
	if resumed > bound {
		t.Errorf("delivery resumed %s after the cut, over --leader-timeout + 2s (%s)", resumed.Round(time.Millisecond), bound)
	}
	if !n2.r.LogContains("ended the former leader's walsender") {
		t.Errorf("relay-2 did not end the former leader's walsender:\n%s", n2.r.LogTail(30))
	}
	if n2.r.LogContains("waiting for the former leader's walsender") {
		t.Errorf("relay-2 waited for the server to end the walsender:\n%s", n2.r.LogTail(30))
	}
	if !n1.r.LogContains("leadership lost") {
		t.Errorf("relay-1 does not log the lost leadership:\n%s", n1.r.LogTail(20))
	}
	flowing("after the takeover")
	// wall-clock: the rest of the cut's hold, under load, before the network heals
	time.Sleep(time.Until(t0.Add(cutHold)))
	n1.proxy.Restore()
	if !within(30*time.Second, 100*time.Millisecond, n1.readyStandby) {
		h, err := n1.ready()
		t.Errorf("relay-1 is not a ready standby 30s after the network healed: %+v %v", h, err)
	}
	if l := leaders([]*relayNode{n1, n2}); len(l) != 1 || l[0] != n2.name {
		t.Errorf("leaders after the heal %v, want [%s]", l, n2.name)
	}
	// Part 2 starts from a settled state: both stopped, everything so far delivered.
	for _, n := range []*relayNode{n1, n2} {
		if code, _ := n.r.Term(20 * time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM:\n%s", n.name, code, n.r.LogTail(20))
		}
	}

	// 2. The leader cut off Kafka only.
	kp := StartKafkaProxy(t)
	stall := "OUTBOX_RELAY_STALL_TIMEOUT=" + stallTimeout.String()
	n3 := cutNode(t, env, "relay-3", "OUTBOX_RELAY_KAFKA_BROKERS="+kp.Addr, stall)
	if !within(30*time.Second, 50*time.Millisecond, n3.streamingLeader) {
		t.Fatalf("relay-3 is not a streaming leader within 30s:\n%s", n3.r.LogTail(20))
	}
	n4 := cutNode(t, env, "relay-4", stall)
	if !within(30*time.Second, 50*time.Millisecond, n4.readyStandby) {
		t.Fatalf("relay-4 is not a ready standby within 30s:\n%s", n4.r.LogTail(20))
	}
	part1 := w.Ledger.Committed()
	if !c.WaitFor(part1, 60*time.Second, 0) {
		t.Fatalf("part 1's events did not all arrive: %s", c.Check(part1, CheckOptions{}))
	}
	_, dupsBefore := c.Seen()
	flowing("before the Kafka cut")
	sampler := startSampler(n3, n4)
	k0 := time.Now()
	kp.Blackhole(kafkaCut + 10*time.Second)
	var notReady readiness
	if !within(kafkaCut, 100*time.Millisecond, func() bool {
		h, err := n3.ready()
		notReady = h
		return err == nil && h.code != 200
	}) {
		h, err := n3.ready()
		t.Errorf("relay-3's readiness did not fail during the Kafka cut: %+v %v", h, err)
	}
	failedAfter := time.Since(k0)
	// wall-clock: the rest of the Kafka cut's hold, under load
	time.Sleep(time.Until(k0.Add(kafkaCut)))
	if h, err := n4.ready(); err != nil || h.Role != "standby" {
		t.Errorf("relay-4 during the Kafka cut: %+v %v, want a standby (no takeover)", h, err)
	}
	kp.Restore()
	healed := time.Now()
	if !within(60*time.Second, 100*time.Millisecond, n3.streamingLeader) {
		h, err := n3.ready()
		t.Errorf("relay-3 not ready 60s after Kafka healed: %+v %v\n%s", h, err, n3.r.LogTail(30))
	}
	var resumedAfter time.Duration
	if !within(60*time.Second, 20*time.Millisecond, func() bool {
		var ok bool
		resumedAfter, ok = firstAfter(c, w.Ledger.Committed(), healed)
		return ok
	}) {
		t.Errorf("nothing committed after Kafka healed arrived within 60s:\n%s", n3.r.LogTail(30))
	}
	flowing("after the Kafka cut")
	samples, overlaps := sampler.finish()
	if len(overlaps) > 0 {
		t.Errorf("two relays claimed leadership at once: %v", overlaps)
	}
	if l := leaders([]*relayNode{n3, n4}); len(l) != 1 || l[0] != n3.name {
		t.Errorf("leaders after the Kafka cut %v, want [%s]: a Kafka cut must not move leadership", l, n3.name)
	}
	if n3.r.LogContains("leadership lost") || n4.r.LogContains("lock acquired") {
		t.Errorf("leadership moved during the Kafka cut:\nrelay-3:\n%s\nrelay-4:\n%s", n3.r.LogTail(20), n4.r.LogTail(20))
	}

	stopLoad()
	committed := w.Ledger.Committed()
	ok := c.WaitFor(committed, 60*time.Second, 2*time.Second)
	rep := c.Check(committed, CheckOptions{})
	_, dupsAfter := c.Seen()
	msg := fmt.Sprintf("TestLeaderCut: PostgreSQL cut: new leader streams after %s, delivery resumes after %s (bound %s); "+
		"Kafka cut of %s: readiness failed after %s (%q), no takeover (%d leader samples), delivery resumed %s after the heal, %d duplicates; %s",
		led.Round(time.Millisecond), resumed.Round(time.Millisecond), bound, kafkaCut, failedAfter.Round(time.Millisecond),
		strings.SplitN(notReady.Reason, ";", 2)[0], samples, resumedAfter.Round(time.Millisecond), dupsAfter-dupsBefore, rep)
	t.Log(msg)
	fmt.Println(msg)
	if dupsAfter != dupsBefore {
		t.Errorf("the Kafka cut duplicated %d records, want 0", dupsAfter-dupsBefore)
	}
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
}
