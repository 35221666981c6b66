package publisher

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/positions"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TestPositionsBegin: the relay's route (positions.Begin) begins a
// publisher's transactions and reports the positions topic's layout; an
// at-least-once publisher has none; anything but a *Publisher is refused.
func TestPositionsBegin(t *testing.T) {
	b := newTxnBroker()
	c := newFakeCluster(b)
	c.setPartitions("orders", 3)
	c.setPartitions("pos", 4)
	cfg := config{Transactions: &TransactionConfig{ID: "tid", PositionsTopic: "pos", PositionKey: []byte("slot"),
		Position: func(*replication.WALEvent, int) []byte { return nil }}}
	p, _ := startPublisher(t, cfg, slog.New(slog.DiscardHandler), c)
	top, err := positions.Begin(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if want := (positions.Topic{Partition: keyPartition([]byte("slot"), 4), Partitions: 4}); top != want {
		t.Fatalf("positions.Begin = %+v, want %+v", top, want)
	}
	if got := top.PartitionOf([]byte("slot")); got != top.Partition {
		t.Fatalf("PartitionOf(the own key) = %d, want %d", got, top.Partition)
	}

	alo, _ := startPublisher(t, config{}, slog.New(slog.DiscardHandler), newFakeCluster(newIdempotentBroker()))
	if top, err := positions.Begin(context.Background(), alo); err != nil || top.Partition != -1 || top.Partitions != 0 {
		t.Fatalf("at-least-once: positions.Begin = %+v, %v; want no layout and no error", top, err)
	}
	if _, err := positions.Begin(context.Background(), "a publisher"); err == nil {
		t.Fatal("positions.Begin of a string succeeded")
	}
}

// TestPublishBeforeBegin: an exactly-once publisher nobody began refuses
// events instead of holding them for a commit that never comes.
func TestPublishBeforeBegin(t *testing.T) {
	c := newFakeCluster(newTxnBroker())
	c.setPartitions("orders", 3)
	cfg := config{Transactions: &TransactionConfig{ID: "tid", PositionsTopic: "pos", PositionKey: []byte("slot")}}
	p, _ := startPublisher(t, cfg, slog.New(slog.DiscardHandler), c)
	var acks ackLog
	if err := p.Publish(context.Background(), testEvent("orders", "agg", "e-1"), acks.acker("e-1")); !errors.Is(err, errNotStarted) {
		t.Fatalf("Publish before begin = %v, want %v", err, errNotStarted)
	}
}
