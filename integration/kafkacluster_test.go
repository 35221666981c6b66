//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// This file drives the three-node Kafka cluster of scripts/kafkacluster.sh
// for the TestCluster* tests. `make cluster-test` runs this package with
// `-run '^TestCluster'` inside `scripts/kafkacluster.sh run`, which points
// OUTBOX_RELAY_KAFKA_BROKERS (and so the whole harness: Env, topics,
// consumers) at the cluster and exports KAFKA_VERSION and KAFKA_NODES, so
// the script called here acts on the same cluster. Against the
// single-broker stack the cluster tests skip.

// KafkaCluster controls the nodes of the cluster the harness runs against.
type KafkaCluster struct {
	t     testing.TB
	Nodes int
}

// RequireCluster returns the cluster, or skips t when the brokers are not
// a cluster of at least three nodes.
func RequireCluster(t testing.TB) *KafkaCluster {
	t.Helper()
	c := clusterOrNil(t)
	if c == nil {
		t.Skipf("needs a three-node Kafka cluster (make cluster-test); %v is a single broker", kafkaBrokers)
	}
	return c
}

// clusterOrNil returns the cluster the brokers form, or nil for a
// single broker (the stack's).
//
// Inside `scripts/kafkacluster.sh run` with KAFKA_NODES=3 the brokers are
// the cluster: a node still fenced after an earlier test's fault is
// waited for (90 s) rather than taken for a single broker.
func clusterOrNil(t testing.TB) *KafkaCluster {
	t.Helper()
	want := 3
	if os.Getenv("KAFKA_NODES") != "3" {
		want = 0
	}
	var n int
	within(90*time.Second, 500*time.Millisecond, func() bool {
		md, err := freshMetadata("")
		if err != nil {
			t.Logf("cluster metadata: %v", err)
			return false
		}
		n = len(md.Brokers)
		return n >= want
	})
	switch {
	case n >= 3:
		return &KafkaCluster{t: t, Nodes: n}
	case want > 0:
		t.Fatalf("KAFKA_NODES=3 but the metadata lists %d broker(s) after 90s", n)
	}
	return nil
}

// ctl runs `scripts/kafkacluster.sh verb args...` and returns its stdout.
func (c *KafkaCluster) ctl(verb string, args ...string) string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(repoRoot, "scripts", "kafkacluster.sh"), verb}, args...)...)
	cmd.Dir = repoRoot
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("scripts/kafkacluster.sh %s %s: %v\n%s%s", verb, strings.Join(args, " "), err, out, stderr.String())
	}
	c.t.Logf("scripts/kafkacluster.sh %s %s: ok in %s", verb, strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return strings.TrimSpace(string(out))
}

// Kill sends SIGKILL to node n.
func (c *KafkaCluster) Kill(n int) { c.ctl("kill", strconv.Itoa(n)) }

// Stop shuts node n down with SIGTERM (a controlled shutdown: leadership
// moves away first).
func (c *KafkaCluster) Stop(n int) { c.ctl("stop", strconv.Itoa(n)) }

// Start starts node n and waits until it has registered.
func (c *KafkaCluster) Start(n int) { c.ctl("start", strconv.Itoa(n)) }

// Pause freezes node n (SIGSTOP); Resume thaws it.
func (c *KafkaCluster) Pause(n int)  { c.ctl("pause", strconv.Itoa(n)) }
func (c *KafkaCluster) Resume(n int) { c.ctl("resume", strconv.Itoa(n)) }

// Controller returns the node id of the active KRaft controller.
func (c *KafkaCluster) Controller() int {
	c.t.Helper()
	out := c.ctl("controller")
	n, err := strconv.Atoi(out)
	if err != nil {
		c.t.Fatalf("scripts/kafkacluster.sh controller printed %q", out)
	}
	return n
}

// Leaders returns the leader's node id of each partition of topic (-1
// without one), as the brokers see it now.
func (c *KafkaCluster) Leaders(topic string) []int {
	c.t.Helper()
	md, err := freshMetadata(topic)
	if err != nil {
		c.t.Fatalf("metadata of %s: %v", topic, err)
	}
	for _, tp := range md.Topics {
		if tp.Name != topic {
			continue
		}
		out := make([]int, len(tp.Partitions))
		for _, p := range tp.Partitions {
			out[p.ID] = -1
			if p.Leader.Host != "" {
				out[p.ID] = p.Leader.ID
			}
		}
		return out
	}
	c.t.Fatalf("topic %s not in the metadata", topic)
	return nil
}

// BusiestLeader returns the node leading most of topic's partitions.
func (c *KafkaCluster) BusiestLeader(topic string) int {
	count := map[int]int{}
	best, most := -1, 0
	for _, l := range c.Leaders(topic) {
		if l < 0 {
			continue
		}
		if count[l]++; count[l] > most {
			best, most = l, count[l]
		}
	}
	return best
}

// WaitNewLeaders waits until no partition of topic is led by node n, or
// without a leader, and returns when that was seen (polled every 100 ms).
func (c *KafkaCluster) WaitNewLeaders(topic string, n int, timeout time.Duration) time.Time {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		moved := true
		for _, l := range c.Leaders(topic) {
			if l == n || l < 0 {
				moved = false
			}
		}
		if moved {
			return time.Now()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("topic %s: partitions still led by node %d (or leaderless) %s after its fault: %v", topic, n, timeout, c.Leaders(topic))
		}
		// wall-clock: poll interval of a wait on the leaders with a deadline
		time.Sleep(100 * time.Millisecond)
	}
}

// freshMetadata asks the brokers one at a time, 3 s each, for topic's
// metadata (the brokers' alone for "") through a transport of its own: kafka-go's default one answers
// from metadata up to 6 s old, and a bootstrap list may hand it a frozen
// node, which accepts the connection and never answers.
func freshMetadata(topic string) (*kafka.MetadataResponse, error) {
	var err error
	for _, b := range kafkaBrokers {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		tr := &kafka.Transport{MetadataTTL: time.Minute}
		var md *kafka.MetadataResponse
		req := &kafka.MetadataRequest{Topics: []string{topic}}
		if topic == "" {
			req.Topics = []string{}
		}
		md, err = (&kafka.Client{Addr: kafka.TCP(b), Transport: tr}).Metadata(ctx, req)
		tr.CloseIdleConnections()
		cancel()
		if err == nil {
			return md, nil
		}
	}
	return nil, err
}

// topicOnEveryBroker returns nil once every bootstrap broker that answers
// knows topic's partitions partitions, each with a leader. A broker that
// does not answer (down, frozen by a test's fault) is not waited for. It
// is immediate on a single broker.
func topicOnEveryBroker(topic string, partitions int) error {
	if len(kafkaBrokers) < 2 {
		return nil
	}
	for _, b := range kafkaBrokers {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		tr := &kafka.Transport{MetadataTTL: time.Minute}
		md, err := (&kafka.Client{Addr: kafka.TCP(b), Transport: tr}).Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		tr.CloseIdleConnections()
		cancel()
		if err != nil {
			continue
		}
		ok := 0
		for _, tp := range md.Topics {
			for _, p := range tp.Partitions {
				if tp.Name == topic && tp.Error == nil && p.Error == nil && p.Leader.Host != "" {
					ok++
				}
			}
		}
		if ok != partitions {
			return fmt.Errorf("broker %s knows %d of %d partitions of %s", b, ok, partitions, topic)
		}
	}
	return nil
}
