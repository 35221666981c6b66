package kafkaproduce

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
	"github.com/segmentio/kafka-go/protocol/endtxn"
	"github.com/segmentio/kafka-go/protocol/findcoordinator"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// scripted is a transaction coordinator that answers each request with the
// next code of its kind (0: success).
type scripted struct {
	init, end, find []kafka.Error
	// add answers AddPartitionsToTxn per topic; a negative code leaves
	// the topic out of the answer.
	add func(topic string) kafka.Error
	// seen is the last EndTxn or AddPartitionsToTxn producer id and epoch.
	seen ProducerID
}

func next(codes *[]kafka.Error) int16 {
	if len(*codes) == 0 {
		return 0
	}
	c := (*codes)[0]
	*codes = (*codes)[1:]
	return int16(c)
}

func (s *scripted) RoundTrip(_ context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	switch req := msg.(type) {
	case *initproducerid.Request:
		code := next(&s.init)
		if code != 0 {
			return &initproducerid.Response{ErrorCode: code}, nil
		}
		return &initproducerid.Response{ProducerID: 4711, ProducerEpoch: 3}, nil
	case *addpartitionstotxn.Request:
		s.seen = ProducerID{req.ProducerID, req.ProducerEpoch}
		res := &addpartitionstotxn.Response{}
		for _, t := range req.Topics {
			code := s.add(t.Name)
			if code < 0 {
				continue
			}
			rr := addpartitionstotxn.ResponseResult{Name: t.Name}
			for _, p := range t.Partitions {
				rr.Results = append(rr.Results, addpartitionstotxn.ResponsePartition{PartitionIndex: p, ErrorCode: int16(code)})
			}
			res.Results = append(res.Results, rr)
		}
		return res, nil
	case *endtxn.Request:
		s.seen = ProducerID{req.ProducerID, req.ProducerEpoch}
		return &endtxn.Response{ErrorCode: next(&s.end)}, nil
	case *findcoordinator.Request:
		code := next(&s.find)
		if code != 0 {
			return &findcoordinator.Response{ErrorCode: code}, nil
		}
		return &findcoordinator.Response{NodeID: 2}, nil
	}
	return nil, errors.New("unexpected request")
}

func txnOver(s *scripted) Txn {
	return Txn{Client: &kafka.Client{Addr: kafka.TCP("127.0.0.1:1"), Transport: s}, ID: "outbox-relay-test"}
}

// TestTxnAnswersClassified: each coordinator call returns the broker's
// refusal as its kafka.Error, and the classes tell what the caller does
// with it: fenced (stop), ends the transaction (abort and start again),
// coordinator busy (retry), operation not attempted (retry the partition).
func TestTxnAnswersClassified(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name                    string
		code                    kafka.Error
		fenced, ends, busy, mov bool
	}{
		{"fenced", kafka.ProducerFenced, true, false, false, false},
		{"old epoch", kafka.InvalidProducerEpoch, true, false, false, false},
		{"out of order", kafka.OutOfOrderSequenceNumber, false, true, false, false},
		{"unknown producer", kafka.UnknownProducerId, false, true, false, false},
		{"invalid state", kafka.InvalidTransactionState, false, true, false, false},
		{"concurrent transactions", kafka.ConcurrentTransactions, false, false, true, false},
		{"coordinator moved", kafka.NotCoordinatorForGroup, false, false, true, true},
		{"coordinator loading", kafka.GroupLoadInProgress, false, false, true, true},
		{"timed out", kafka.RequestTimedOut, false, false, true, false},
	} {
		s := &scripted{init: []kafka.Error{c.code}, end: []kafka.Error{c.code}}
		tx := txnOver(s)
		_, ierr := tx.InitProducerID(ctx)
		eerr := tx.End(ctx, ProducerID{4711, 3}, true)
		for _, err := range []error{ierr, eerr} {
			if !errors.Is(err, c.code) {
				t.Errorf("%s: %v, want the broker's %v", c.name, err, c.code)
			}
			if Fenced(err) != c.fenced || EndsTransaction(err) != c.ends || CoordinatorBusy(err) != c.busy || CoordinatorMoving(err) != c.mov {
				t.Errorf("%s: classes fenced %v ends %v busy %v moving %v, want %v %v %v %v", c.name,
					Fenced(err), EndsTransaction(err), CoordinatorBusy(err), CoordinatorMoving(err), c.fenced, c.ends, c.busy, c.mov)
			}
		}
		if s.seen != (ProducerID{4711, 3}) {
			t.Errorf("%s: EndTxn carried %+v", c.name, s.seen)
		}
	}
	pid, err := txnOver(&scripted{}).InitProducerID(ctx)
	if err != nil || pid != (ProducerID{4711, 3}) {
		t.Fatalf("InitProducerId: %+v, %v", pid, err)
	}
	if n, err := txnOver(&scripted{find: []kafka.Error{kafka.GroupCoordinatorNotAvailable}}).FindCoordinator(ctx); !CoordinatorMoving(err) || n != -1 {
		t.Errorf("FindCoordinator while the coordinator loads: %d, %v", n, err)
	}
}

// TestTxnAddPartitions: one topic's refusal comes back for its own
// partitions; the others, which Kafka did not add for its sake, answer
// ErrOperationNotAttempted; a topic missing from the answer fails the
// call.
func TestTxnAddPartitions(t *testing.T) {
	ctx := context.Background()
	parts := []TopicPartition{{"orders", 0}, {"orders", 1}, {"secret", 0}}
	s := &scripted{add: func(topic string) kafka.Error {
		if topic == "secret" {
			return kafka.TopicAuthorizationFailed
		}
		return ErrOperationNotAttempted
	}}
	failed, err := txnOver(s).AddPartitions(ctx, ProducerID{4711, 3}, parts)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(failed[TopicPartition{"secret", 0}], kafka.TopicAuthorizationFailed) ||
		!errors.Is(failed[TopicPartition{"orders", 1}], ErrOperationNotAttempted) || len(failed) != 3 {
		t.Errorf("failed %v", failed)
	}
	if s.seen != (ProducerID{4711, 3}) {
		t.Errorf("AddPartitionsToTxn carried %+v", s.seen)
	}
	s.add = func(string) kafka.Error { return 0 }
	if failed, err := txnOver(s).AddPartitions(ctx, ProducerID{4711, 3}, parts); err != nil || failed != nil {
		t.Errorf("all added: %v, %v", failed, err)
	}
	s.add = func(topic string) kafka.Error {
		if topic == "secret" {
			return -1
		}
		return 0
	}
	if _, err := txnOver(s).AddPartitions(ctx, ProducerID{4711, 3}, parts); err == nil {
		t.Error("a topic missing from the answer passed")
	}
}
