package main

import (
	"strings"
	"testing"
)

func TestTxDiffAndConcurrentTxn(t *testing.T) {
	before, err := parseMetrics(strings.NewReader(`outbox_relay_transaction_commit_seconds_sum 1
outbox_relay_transaction_commit_seconds_count 10
outbox_relay_transaction_events_sum 1000
outbox_relay_transaction_events_count 10
outbox_relay_publish_errors_total{class="transient",reason="concurrent_transactions"} 5
outbox_relay_publish_errors_total{class="transient",reason="not_enough_replicas"} 1
`))
	if err != nil {
		t.Fatal(err)
	}
	after, _ := parseMetrics(strings.NewReader(`outbox_relay_transaction_commit_seconds_sum 1.5
outbox_relay_transaction_commit_seconds_count 20
outbox_relay_transaction_events_sum 3000
outbox_relay_transaction_events_count 20
outbox_relay_publish_errors_total{class="transient",reason="concurrent_transactions"} 12
outbox_relay_publish_errors_total{class="transient",reason="not_enough_replicas"} 1
`))
	s := txDiff(after, before)
	if s.TxCommits != 10 || s.TxCommitMeanMs != 50 || s.TxEventsMean != 200 {
		t.Fatalf("txDiff = %+v", s)
	}
	if got := after.concurrentTxn() - before.concurrentTxn(); got != 7 {
		t.Fatalf("concurrent_transactions retries = %v, want 7", got)
	}
}

func TestDeliveryChecks(t *testing.T) {
	r := &results{
		Drains: []drainResult{
			{Mode: 1, Events: 1000, RelaySec: 1, variant: variant{Delivery: deliveryALO}, Round: 1},
			{Mode: 1, Events: 1000, RelaySec: 1.25, variant: variant{Delivery: deliveryEOS}, Round: 1},
		},
		Latency: []latencyResult{
			{Target: 1000, TxSize: 1, Samples: 1, ConsP99: 20, variant: variant{Delivery: deliveryALO}},
			{Target: 1000, TxSize: 1, Samples: 1, ConsP99: 160, variant: variant{Delivery: deliveryEOS}},
		},
	}
	cs := r.deliveryChecks()
	if len(cs) != 2 || !cs[0].Pass || cs[1].Pass {
		t.Fatalf("checks = %v", cs)
	}
	if md := renderDeliveries(r); !strings.Contains(md, "**80 %**") {
		t.Fatalf("side-by-side table:\n%s", md)
	}
	r.Drains, r.Latency = r.Drains[:1], r.Latency[:1]
	if cs := r.deliveryChecks(); cs != nil || renderDeliveries(r) != "" {
		t.Fatal("one delivery only: no side-by-side checks or table")
	}
}
