//go:build integration

package integration

// TestStallDetection: a broker that stops answering (SIGSTOP of a private
// Kafka, so the shared stack is untouched) under steady load must turn
// /readyz 503 with a stall reason within --stall-timeout, set
// outbox_relay_stalled, and log it once; after SIGCONT all of it clears by
// itself and every committed event reaches Kafka in per-aggregate order.
// Before the freeze, the same load (a moving drain) never reports a stall.

import (
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestStallDetection(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	const (
		stallTimeout = 5 * time.Second
		partitions   = 3
		// pollSlack covers the relay's 1 s observer tick and the probe cadence.
		pollSlack = 2 * time.Second
	)
	pki := newSecurePKI(t)
	k := startSecureKafka(t, pki)
	var frozen atomic.Bool
	thaw := func() {
		if frozen.CompareAndSwap(true, false) {
			_ = k.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(thaw) // registered after startSecureKafka: runs before its stop

	env := NewEnv(t, EnvOptions{NoTopic: true, Partitions: partitions})
	env.Brokers = []string{k.Addr}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relay := StartRelay(t, processEnv(env.BaseEnv(), k.clientEnv(), []string{
		"OUTBOX_RELAY_CREATE_TOPICS=true",
		fmt.Sprintf("OUTBOX_RELAY_TOPIC_PARTITIONS=%d", partitions),
		"OUTBOX_RELAY_METRICS_ADDR=" + addr,
		"OUTBOX_RELAY_STALL_TIMEOUT=" + stallTimeout.String(),
		"OUTBOX_RELAY_MAX_INFLIGHT_EVENTS=300",
		"OUTBOX_RELAY_BACKOFF_MAX=1s",
		"OUTBOX_RELAY_HEARTBEAT_INTERVAL=1s",
		"OUTBOX_RELAY_LOG_LEVEL=info",
	}))
	node := &relayNode{name: "relay", r: relay, addr: addr}
	if !within(60*time.Second, 100*time.Millisecond, func() bool { return node.streamingLeader() || !relay.Running() }) || !relay.Running() {
		t.Fatalf("relay not a streaming leader within 60s; tail:\n%s", relay.LogTail(30))
	}

	// Steady load: a transaction of 4 aggregates' events every 10 ms.
	w := env.NewWriter(NewLedger())
	stopLoad := steadyLoad(t, w)

	// wall-clock: a moving drain is no stall: probe /readyz for three stall timeouts (negative check).
	// Every answer must be 200 and not stalled. A probe the relay did not answer within the probe
	// client's 500 ms is no verdict (on the 2-core CI machine, a JVM starting beside the relay's
	// one OS thread once held an answer back that long: ci25), so it is retried, but at most a
	// quarter of the probes may go unanswered, and at least one answered probe must fall in
	// each stall timeout of the window.
	var probes, unanswered int
	answered := map[int]bool{}
	start := time.Now()
	// The sleep is the probe interval of a negative check over a fixed window: there is no
	// condition to wait on, only the window to sample.
	for end := start.Add(3 * stallTimeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		probes++
		h, err := node.ready()
		if err != nil {
			unanswered++
			t.Logf("under moving load, /readyz probe %d unanswered: %v", probes, err)
			continue
		}
		if h.code != 200 || strings.HasPrefix(h.Reason, "stalled") {
			stopLoad()
			t.Fatalf("under moving load /readyz = %d %+v; tail:\n%s", h.code, h, relay.LogTail(20))
		}
		answered[int(time.Since(start)/stallTimeout)] = true
	}
	if unanswered*4 > probes || !answered[0] || !answered[1] || !answered[2] {
		stopLoad()
		t.Fatalf("under moving load %d of %d /readyz probes unanswered (answered in stall timeouts %v of 0-2); tail:\n%s",
			unanswered, probes, answered, relay.LogTail(20))
	}
	if n := k.count(env.Topic, partitions); n == 0 {
		stopLoad()
		t.Fatalf("nothing reached Kafka under load; tail:\n%s", relay.LogTail(30))
	}
	if v := metricValue(t, addr, "outbox_relay_stalled"); v != 0 {
		t.Errorf("outbox_relay_stalled = %v under moving load, want 0", v)
	}

	// Freeze the broker.
	before := w.Ledger.CommittedCount()
	frozen.Store(true)
	if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	var stalled readiness
	if !within(stallTimeout+pollSlack+3*time.Second, 100*time.Millisecond, func() bool {
		h, err := node.ready()
		stalled = h
		return err == nil && h.code == 503 && strings.HasPrefix(h.Reason, "stalled: no acknowledgement for")
	}) {
		thaw()
		stopLoad()
		t.Fatalf("no stall reported within %s of the freeze: /readyz %+v; tail:\n%s", stallTimeout+pollSlack+3*time.Second, stalled, relay.LogTail(30))
	}
	detect := time.Since(t0)
	t.Logf("broker frozen (SIGSTOP) with %d events committed: /readyz 503 after %s (--stall-timeout %s): %q",
		before, detect.Round(10*time.Millisecond), stallTimeout, stalled.Reason)
	if detect > stallTimeout+pollSlack {
		t.Errorf("stall reported after %s, want within %s + %s", detect, stallTimeout, pollSlack)
	}
	if detect < stallTimeout-time.Second {
		t.Errorf("stall reported after %s, before --stall-timeout %s could pass", detect, stallTimeout)
	}
	if !strings.Contains(stalled.Reason, "events in flight; last error: ") {
		t.Errorf("stall reason lacks the window and the cause: %q", stalled.Reason)
	}
	if v := metricValue(t, addr, "outbox_relay_stalled"); v != 1 {
		t.Errorf("outbox_relay_stalled = %v while stalled, want 1", v)
	}
	// wall-clock: stay frozen past kafka-go's write timeout (10 s), so a cause is seen.
	time.Sleep(12 * time.Second)
	if h, err := node.ready(); err == nil {
		t.Logf("after %s frozen: /readyz %d %q", time.Since(t0).Round(time.Second), h.code, h.Reason)
	}
	if n := len(relay.LogLines("delivery stalled", 10)); n != 1 {
		t.Errorf("stall logged %d times, want once", n)
	}

	// Thaw: acknowledgements resume and everything clears by itself.
	thaw()
	t1 := time.Now()
	if !within(90*time.Second, 100*time.Millisecond, func() bool {
		h, err := node.ready()
		return err == nil && h.code == 200 && !strings.HasPrefix(h.Reason, "stalled")
	}) {
		stopLoad()
		h, _ := node.ready()
		t.Fatalf("/readyz still not 200 90s after SIGCONT: %+v; tail:\n%s", h, relay.LogTail(30))
	}
	t.Logf("broker resumed (SIGCONT): /readyz 200 after %s", time.Since(t1).Round(10*time.Millisecond))
	if v := metricValue(t, addr, "outbox_relay_stalled"); v != 0 {
		t.Errorf("outbox_relay_stalled = %v after the thaw, want 0", v)
	}
	if !relay.LogContains("delivery stall cleared") {
		t.Errorf("no clear logged; tail:\n%s", relay.LogTail(20))
	}

	// wall-clock: a little more load after the thaw, then everything must be in Kafka.
	time.Sleep(2 * time.Second)
	stopLoad()
	expected := w.Ledger.Committed()
	if !within(90*time.Second, 500*time.Millisecond, func() bool { return k.count(env.Topic, partitions) >= len(expected) }) {
		t.Logf("only %d of %d records in Kafka after 90s", k.count(env.Topic, partitions), len(expected))
	}
	recs := k.readAll(t, env.Topic, partitions, len(expected), 2*time.Minute)
	rep := CheckRecords(recs, partitions, expected, CheckOptions{})
	t.Logf("TestStallDetection: %s", rep)
	if !rep.OK() {
		t.Fatalf("delivery check failed: %s\nrelay tail:\n%s", rep, relay.LogTail(30))
	}
	if !relay.Running() {
		t.Fatalf("relay exited; tail:\n%s", relay.LogTail(30))
	}
}
