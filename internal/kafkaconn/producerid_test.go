package kafkaconn

import (
	"bytes"
	"testing"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// TestIdempotentInitEncodes: idempotentInit goes on the wire exactly as
// kafka-go's initproducerid.Request with the same fields, at every version
// kafka-go speaks (a null transactional id, producer id and epoch -1 from
// v3), and the Transport routes it to a broker, not to a transaction
// coordinator.
func TestIdempotentInitEncodes(t *testing.T) {
	for v := int16(0); v <= 4; v++ {
		var want, got bytes.Buffer
		if err := protocol.WriteRequest(&want, v, 7, "outbox-relay", &initproducerid.Request{ProducerID: -1, ProducerEpoch: -1}); err != nil {
			t.Fatal(err)
		}
		if err := protocol.WriteRequest(&got, v, 7, "outbox-relay", &idempotentInit{ProducerID: -1, ProducerEpoch: -1}); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("v%d: encodes as\n%x\nwant\n%x", v, got.Bytes(), want.Bytes())
		}
	}
	var m protocol.Message = &idempotentInit{}
	if _, ok := m.(protocol.TransactionalMessage); ok {
		t.Error("idempotentInit is a TransactionalMessage: the Transport would look up a transaction coordinator")
	}
	b, ok := m.(protocol.BrokerMessage)
	if !ok {
		t.Fatal("idempotentInit is no BrokerMessage")
	}
	cluster := protocol.Cluster{Brokers: map[int32]protocol.Broker{3: {ID: 3}, 1: {ID: 1}, 2: {ID: 2}}}
	seen := map[int32]bool{}
	for range 200 {
		got, err := b.Broker(cluster)
		if err != nil {
			t.Fatal(err)
		}
		seen[got.ID] = true
	}
	if len(seen) != 3 {
		t.Errorf("brokers picked %v, want each of 1, 2, 3 over 200 requests", seen)
	}
	if _, err := b.Broker(protocol.Cluster{}); err == nil {
		t.Error("Broker of an empty cluster: no error")
	}
}
