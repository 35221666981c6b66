package kafkaproduce

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
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

// scriptedInit answers InitProducerId with its codes in turn, then with
// producer id 7.
type scriptedInit struct {
	codes []int16
	calls int
}

func (s *scriptedInit) RoundTrip(_ context.Context, _ net.Addr, _ kafka.Request) (kafka.Response, error) {
	s.calls++
	if len(s.codes) > 0 {
		c := s.codes[0]
		s.codes = s.codes[1:]
		return &initproducerid.Response{ErrorCode: c}, nil
	}
	return &initproducerid.Response{ProducerID: 7, ProducerEpoch: 0}, nil
}

// TestInitProducerIDRetriesCoordinatorNotReady: a fresh broker's
// COORDINATOR_LOAD_IN_PROGRESS (and its kin) is retried until the id
// comes; a refusal is returned at once; a broker that never gets ready
// ends with its last answer when the call's 10 s are up.
func TestInitProducerIDRetriesCoordinatorNotReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := &scriptedInit{codes: []int16{int16(kafka.GroupLoadInProgress), int16(kafka.GroupCoordinatorNotAvailable), int16(kafka.NotCoordinatorForGroup)}}
		pid, err := InitProducerID(context.Background(), rt, kafka.TCP("b:9092"))
		if err != nil || pid.ID != 7 || rt.calls != 4 {
			t.Fatalf("after three not-ready answers: %+v, %v in %d calls, want id 7 in 4", pid, err, rt.calls)
		}

		rt = &scriptedInit{codes: []int16{int16(kafka.ClusterAuthorizationFailed)}}
		if _, err := InitProducerID(context.Background(), rt, kafka.TCP("b:9092")); !errors.Is(err, kafka.ClusterAuthorizationFailed) || rt.calls != 1 {
			t.Fatalf("a refusal: %v in %d calls, want ClusterAuthorizationFailed in 1", err, rt.calls)
		}

		never := make([]int16, 1000)
		for i := range never {
			never[i] = int16(kafka.GroupLoadInProgress)
		}
		rt = &scriptedInit{codes: never}
		start := time.Now()
		_, err = InitProducerID(context.Background(), rt, kafka.TCP("b:9092"))
		if !errors.Is(err, kafka.GroupLoadInProgress) || time.Since(start) > 10*time.Second || rt.calls < 10 {
			t.Fatalf("never ready: %v after %s in %d calls, want GroupLoadInProgress within 10s", err, time.Since(start), rt.calls)
		}
	})
}
