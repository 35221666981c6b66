//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSecureReconcileReplay runs `reconcile` and `replay` against a Kafka
// whose only client listener is SASL_SSL with client certificates
// required (the secure stack of TestSecurity). They must honour
// --kafka-tls* and --kafka-sasl-* like `run` does: a client built without
// them talks PLAINTEXT to the TLS port and never gets an answer.
func TestSecureReconcileReplay(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	pki := newSecurePKI(t)
	k := startSecureKafka(t, pki)
	env := NewEnv(t, EnvOptions{NoTopic: true, Partitions: 3})
	env.Brokers = []string{k.Addr}
	secure := append(k.clientEnv(), "OUTBOX_RELAY_CREATE_TOPICS=true", "OUTBOX_RELAY_TOPIC_PARTITIONS=3")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	relay := env.StartRelay(append(secure, "OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms")...)
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	for i := 0; i < 20; i++ {
		if _, err := w.Write(ctx, []string{fmt.Sprintf("sec-%d", i%5)}, true); err != nil {
			t.Fatal(err)
		}
	}
	n := len(ledger.Committed())
	if !within(60*time.Second, 200*time.Millisecond, func() bool { return k.count(env.Topic, 3) >= n }) {
		t.Fatalf("%d of %d events reached the SASL_SSL broker; relay tail:\n%s", k.count(env.Topic, 3), n, relay.LogTail(20))
	}
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("relay SIGTERM: exited=%v code=%d", exited, code)
	}

	// reconcile reads every topic's records over SASL_SSL: nothing missing.
	start := time.Now()
	res := env.RunCLI(90*time.Second, secure, "reconcile", "--since", "10m", "--settle", "0s", "--read-timeout", "20s")
	t.Logf("reconcile over SASL_SSL (exit %d, %s):\n%s%s", res.Code, time.Since(start).Round(time.Millisecond), res.Stdout, tail(res.Stderr, 10))
	if res.Code != 0 || !strings.Contains(res.Stdout, "nothing missing") {
		t.Fatalf("reconcile over SASL_SSL: exit %d, want 0 with \"nothing missing\"", res.Code)
	}
	// An event the relay never published is found missing: reconcile did
	// compare with what the broker holds.
	if _, err := w.Write(ctx, []string{"sec-late"}, true); err != nil {
		t.Fatal(err)
	}
	res = env.RunCLI(90*time.Second, secure, "reconcile", "--since", "10m", "--settle", "0s", "--read-timeout", "20s")
	if res.Code != 3 || !strings.Contains(res.Stdout, "missing from Kafka: 1") {
		t.Fatalf("reconcile with one unpublished event: exit %d, want 3\n%s%s", res.Code, res.Stdout, tail(res.Stderr, 10))
	}

	// replay re-publishes over SASL_SSL.
	before := k.count(env.Topic, 3)
	res = env.RunCLI(90*time.Second, secure, "replay", "--all")
	t.Logf("replay over SASL_SSL (exit %d):\n%s%s", res.Code, res.Stdout, tail(res.Stderr, 10))
	if res.Code != 0 || !strings.Contains(res.Stdout, "replayed") {
		t.Fatalf("replay --all over SASL_SSL: exit %d, want 0", res.Code)
	}
	if after := k.count(env.Topic, 3); after < before+n+1 {
		t.Errorf("replay --all: the topic grew from %d to %d records, want at least %d more", before, after, n+1)
	}
}
