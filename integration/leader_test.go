//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Leader election timeouts of TestLeaderFailover (the relay's flags).
const (
	leTimeout   = 5 * time.Second        // --leader-timeout
	leKeepalive = 250 * time.Millisecond // --leader-keepalive-interval
	lePoll      = 300 * time.Millisecond // --leader-poll-interval
	leWALSender = 5 * time.Second        // --wal-sender-timeout
	// leSlack covers process start-up, the fence poll and a loaded machine.
	leSlack = 4 * time.Second
)

// relayNode is one relay of a leader election test, with its PostgreSQL
// connections routed through its own proxy and its health endpoints.
type relayNode struct {
	name  string
	r     *Relay
	proxy *Proxy
	addr  string // metrics/health address
}

// readiness is the /readyz body.
type readiness struct {
	code      int
	Status    string `json:"status"`
	Role      string `json:"role"`
	Streaming bool   `json:"streaming"`
	Reason    string `json:"reason"`
}

var probeClient = &http.Client{Timeout: 500 * time.Millisecond}

func (n *relayNode) ready() (readiness, error) {
	var h readiness
	resp, err := probeClient.Get("http://" + n.addr + "/readyz")
	if err != nil {
		return h, err
	}
	defer resp.Body.Close()
	h.code = resp.StatusCode
	return h, json.NewDecoder(resp.Body).Decode(&h)
}

// streamingLeader reports whether n is the leader and streams.
func (n *relayNode) streamingLeader() bool {
	h, err := n.ready()
	return err == nil && h.code == 200 && h.Role == "leader" && h.Streaming
}

// readyStandby reports whether n is a healthy standby.
func (n *relayNode) readyStandby() bool {
	h, err := n.ready()
	return err == nil && h.code == 200 && h.Role == "standby"
}

// leaderGauge scrapes outbox_relay_leader; an unreachable process counts 0.
func (n *relayNode) leaderGauge() float64 {
	resp, err := probeClient.Get("http://" + n.addr + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		k, err := resp.Body.Read(buf)
		sb.Write(buf[:k])
		if err != nil {
			break
		}
	}
	for _, line := range strings.Split(sb.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "outbox_relay_leader "); ok {
			var f float64
			fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

func startNode(t *testing.T, env *Env, name string) *relayNode {
	t.Helper()
	proxy, url := StartPGProxy(t)
	n := &relayNode{name: name, proxy: proxy, addr: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	n.r = env.StartRelay(
		"OUTBOX_RELAY_DATABASE_URL="+url,
		"OUTBOX_RELAY_METRICS_ADDR="+n.addr,
		"OUTBOX_RELAY_LEADER_TIMEOUT="+leTimeout.String(),
		"OUTBOX_RELAY_LEADER_KEEPALIVE_INTERVAL="+leKeepalive.String(),
		"OUTBOX_RELAY_LEADER_POLL_INTERVAL="+lePoll.String(),
		"OUTBOX_RELAY_WAL_SENDER_TIMEOUT="+leWALSender.String(),
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=5s",
		"OUTBOX_RELAY_LOG_LEVEL=info",
	)
	return n
}

// overlapSampler scrapes every node's outbox_relay_leader gauge and counts
// samples where more than one process claimed leadership.
type overlapSampler struct {
	mu       sync.Mutex
	nodes    []*relayNode
	samples  int
	overlaps []string
	stop     chan struct{}
	done     chan struct{}
}

func startSampler(nodes ...*relayNode) *overlapSampler {
	s := &overlapSampler{nodes: nodes, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			s.mu.Lock()
			nodes := append([]*relayNode(nil), s.nodes...)
			s.mu.Unlock()
			var leaders []string
			for _, n := range nodes {
				if n.r.Running() && n.leaderGauge() == 1 {
					leaders = append(leaders, n.name)
				}
			}
			s.mu.Lock()
			s.samples++
			if len(leaders) > 1 {
				s.overlaps = append(s.overlaps, time.Now().Format("15:04:05.000")+" "+strings.Join(leaders, ","))
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *overlapSampler) add(n *relayNode) {
	s.mu.Lock()
	s.nodes = append(s.nodes, n)
	s.mu.Unlock()
}

func (s *overlapSampler) finish() (samples int, overlaps []string) {
	close(s.stop)
	<-s.done
	return s.samples, s.overlaps
}

// waitLeader waits for one node of nodes (except not) to be the streaming
// leader and returns it with the time it took.
func waitLeader(t *testing.T, nodes []*relayNode, not *relayNode, since time.Time, timeout time.Duration) (*relayNode, time.Duration) {
	t.Helper()
	deadline := since.Add(timeout)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n != not && n.r.Running() && n.streamingLeader() {
				return n, time.Since(since)
			}
		}
		// wall-clock: poll interval of a wait for a streaming leader with a deadline
		time.Sleep(50 * time.Millisecond)
	}
	for _, n := range nodes {
		h, err := n.ready()
		t.Logf("%s: running=%v readyz=%+v err=%v", n.name, n.r.Running(), h, err)
	}
	t.Fatalf("no streaming leader within %s", timeout)
	return nil, 0
}

// leaders returns the nodes that report the leader role.
func leaders(nodes []*relayNode) (names []string) {
	for _, n := range nodes {
		if h, err := n.ready(); err == nil && h.Role == "leader" {
			names = append(names, n.name)
		}
	}
	return names
}

// TestLeaderFailover runs three relays on one slot, checks that exactly one
// streams and the others are ready standbys, then fails the leader three
// ways under steady load — SIGTERM, kill -9, and a network blackhole of its
// PostgreSQL connections — measuring each takeover against the bound its
// timeouts imply. Nothing may be lost or reordered per aggregate, and no two
// relays may ever claim leadership at once.
func TestLeaderFailover(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	env := NewEnv(t, EnvOptions{})
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	wr := env.NewWriter(ledger)

	n1 := startNode(t, env, "relay-1")
	first, _ := waitLeader(t, []*relayNode{n1}, nil, time.Now(), 30*time.Second)
	n2 := startNode(t, env, "relay-2")
	n3 := startNode(t, env, "relay-3")
	nodes := []*relayNode{n1, n2, n3}
	for _, n := range []*relayNode{n2, n3} {
		if !within(20*time.Second, 100*time.Millisecond, n.readyStandby) {
			h, err := n.ready()
			t.Fatalf("%s is not a ready standby within 20s: %+v %v\n%s", n.name, h, err, n.r.LogTail(20))
		}
	}
	if l := leaders(nodes); len(l) != 1 || l[0] != first.name {
		t.Fatalf("leaders %v, want exactly [%s]", l, first.name)
	}
	for _, n := range nodes {
		resp, err := probeClient.Get("http://" + n.addr + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s /healthz: %v %v", n.name, resp, err)
		}
		resp.Body.Close()
	}
	// The standby names the lock holder just after it turns standby (one
	// more query): wait for the line rather than read the log once.
	if !within(5*time.Second, 50*time.Millisecond, func() bool { return n2.r.LogContains("standby: another relay holds the lock") }) {
		t.Errorf("standby log does not name the lock holder:\n%s", n2.r.LogTail(10))
	}
	sampler := startSampler(nodes...)

	// Steady load over 100 aggregates.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stop atomic.Bool
	werr := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewSource(11))
		for !stop.Load() {
			ids := make([]string, 4)
			for i := range ids {
				ids[i] = aggName(rng.Intn(100))
			}
			if _, err := wr.Write(ctx, ids, true); err != nil {
				werr <- err
				return
			}
			// wall-clock: paces the load writer (a transaction every 3 ms)
			time.Sleep(3 * time.Millisecond)
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
	flowing := func(what string) {
		t.Helper()
		n := c.Count()
		if !c.WaitCount(n+300, 30*time.Second) {
			t.Fatalf("%s: fewer than 300 more records within 30s (%d)", what, c.Count())
		}
	}
	flowing("before failover")

	var results []string
	report := func(kind string, took, bound time.Duration) {
		t.Helper()
		line := fmt.Sprintf("%s takeover %s (bound %s)", kind, took.Round(time.Millisecond), bound)
		results = append(results, line)
		t.Log(line)
		if took > bound {
			t.Errorf("%s takeover took %s, over its bound %s", kind, took.Round(time.Millisecond), bound)
		}
	}

	// 1. SIGTERM: the leader drains, releases the lock; a standby polls it.
	cur := first
	t0 := time.Now()
	exited := make(chan int, 1)
	go func() { code, _ := cur.r.Term(15 * time.Second); exited <- code }()
	next, took := waitLeader(t, nodes, cur, t0, 30*time.Second)
	report("SIGTERM", took, 5*time.Second)
	if code := <-exited; code != 0 {
		t.Errorf("SIGTERM: %s exited %d, want 0", cur.name, code)
	}
	flowing("after SIGTERM failover")

	// 2. kill -9: the kernel closes its sockets; the lock goes with the
	// session, the walsender with its connection.
	cur = next
	t0 = time.Now()
	cur.r.Kill9()
	next, took = waitLeader(t, nodes, cur, t0, 30*time.Second)
	report("kill -9", took, lePoll+leSlack)
	flowing("after kill -9 failover")

	// 3. Blackhole: the leader's PostgreSQL traffic hangs (no RST, no FIN).
	// It must stop by itself within leader-timeout/2; the server frees its
	// lock after leader-timeout and its slot after wal-sender-timeout.
	n4 := startNode(t, env, "relay-4")
	nodes = append(nodes, n4)
	sampler.add(n4)
	if !within(20*time.Second, 100*time.Millisecond, n4.readyStandby) {
		t.Fatalf("relay-4 is not a ready standby within 20s:\n%s", n4.r.LogTail(20))
	}
	cur = next
	t0 = time.Now()
	cur.proxy.Blackhole(60 * time.Second)
	var stoppedAfter time.Duration
	go func() {
		if within(30*time.Second, 20*time.Millisecond, func() bool { return cur.leaderGauge() == 0 }) {
			stoppedAfter = time.Since(t0)
		}
	}()
	next, took = waitLeader(t, nodes, cur, t0, 60*time.Second)
	report("blackhole", took, max(leTimeout, leWALSender)+lePoll+leSlack)
	if stoppedAfter == 0 || stoppedAfter > leTimeout/2+leKeepalive+time.Second {
		t.Errorf("blackholed leader stopped after %s, want within %s", stoppedAfter, leTimeout/2+leKeepalive+time.Second)
	}
	if stoppedAfter > took {
		t.Errorf("blackholed leader stopped (%s) after the new leader streamed (%s)", stoppedAfter, took)
	}
	results = append(results, fmt.Sprintf("blackholed leader stopped streaming after %s", stoppedAfter.Round(time.Millisecond)))
	if !cur.r.LogContains("leadership lost") {
		t.Errorf("%s does not log the lost leadership:\n%s", cur.name, cur.r.LogTail(20))
	}
	flowing("after blackhole failover")
	cur.proxy.Restore()
	if !within(30*time.Second, 100*time.Millisecond, cur.readyStandby) {
		h, err := cur.ready()
		t.Errorf("%s is not a ready standby 30s after the network healed: %+v %v", cur.name, h, err)
	}

	// wall-clock: load flows on after the network healed before the writer stops
	time.Sleep(time.Second)
	stopWriter()
	committed := ledger.Committed()
	ok := c.WaitFor(committed, 60*time.Second, 2*time.Second)
	samples, overlaps := sampler.finish()
	rep := c.Check(committed, CheckOptions{})
	if l := leaders(nodes); len(l) != 1 || l[0] != next.name {
		t.Errorf("leaders at the end %v, want [%s]", l, next.name)
	}
	msg := fmt.Sprintf("TestLeaderFailover: %s; %s; leader samples=%d overlaps=%d",
		strings.Join(results, "; "), rep, samples, len(overlaps))
	t.Log(msg)
	fmt.Println(msg)
	if len(overlaps) > 0 {
		t.Errorf("two relays claimed leadership at once: %v", overlaps)
	}
	if !ok {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
}
