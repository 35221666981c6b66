package kafkaproduce

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// ProducerID is what InitProducerId answers: the id an idempotent
// producer stamps its batches with, and its epoch.
type ProducerID struct {
	ID    int64
	Epoch int16
}

// InitProducerID asks a broker for a producer id without a transactional
// id, as an idempotent producer does before its first write (the relay's
// publisher, and doctor's check of the principal's IDEMPOTENT_WRITE
// permission). rt is the client's transport, addr its bootstrap brokers.
// A broker's refusal is returned as its kafka.Error, wrapped.
//
// A freshly started broker answers COORDINATOR_LOAD_IN_PROGRESS until it
// holds a block of producer ids from the controller; that answer, and the
// other coordinator-not-ready ones, are retried (as the Java producer
// does) with a doubling pause from 50 ms to 1 s, within the call's 10 s.
func InitProducerID(ctx context.Context, rt kafka.RoundTripper, addr net.Addr) (ProducerID, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		pid, err := initProducerID(ctx, rt, addr)
		if err == nil || !coordinatorNotReady(err) {
			return pid, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ProducerID{}, err
		case <-t.C:
		}
	}
}

// coordinatorNotReady reports the answers a broker gives while it cannot
// hand out producer ids yet, but soon will.
func coordinatorNotReady(err error) bool {
	return errors.Is(err, kafka.GroupLoadInProgress) || errors.Is(err, kafka.GroupCoordinatorNotAvailable) ||
		errors.Is(err, kafka.NotCoordinatorForGroup)
}

// initProducerID is one InitProducerId round trip.
func initProducerID(ctx context.Context, rt kafka.RoundTripper, addr net.Addr) (ProducerID, error) {
	m, err := rt.RoundTrip(ctx, addr, &idempotentInit{ProducerID: -1, ProducerEpoch: -1})
	if err != nil {
		return ProducerID{}, fmt.Errorf("InitProducerId: %w", err)
	}
	res, ok := m.(*initproducerid.Response)
	if !ok {
		return ProducerID{}, fmt.Errorf("InitProducerId: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return ProducerID{}, fmt.Errorf("InitProducerId: %w", kafka.Error(res.ErrorCode))
	}
	return ProducerID{ID: res.ProducerID, Epoch: res.ProducerEpoch}, nil
}

// idempotentInit is an InitProducerId request without a transactional id
// that kafka-go's Transport sends straight to a broker. Its own
// initproducerid.Request is a protocol.TransactionalMessage, so the
// Transport first asks FindCoordinator for the coordinator of the empty
// transactional id: on a cluster without transactions that creates the
// 50-partition __transaction_state topic (on a single broker whose
// transaction.state.log.replication.factor is the default 3 it never
// can) and the request then fails with COORDINATOR_LOAD_IN_PROGRESS while
// it loads, although any broker answers a null transactional id itself,
// as the Java producer relies on. The type has initproducerid.Request's
// fields (so kafka-go encodes it as that request, by the API key's
// registered layout; the test compares the bytes) and, instead of its
// Transaction method, a Broker method (protocol.BrokerMessage) that picks
// the broker.
type idempotentInit initproducerid.Request

// ApiKey is InitProducerId's (protocol.Message).
func (r *idempotentInit) ApiKey() protocol.ApiKey { return protocol.InitProducerId }

// Broker picks a broker at random, so that a retry after a failure (a
// broker down but still in the metadata) likely asks another one
// (protocol.BrokerMessage).
func (r *idempotentInit) Broker(c protocol.Cluster) (protocol.Broker, error) {
	ids := c.BrokerIDs()
	if len(ids) == 0 {
		return protocol.Broker{}, errors.New("the metadata names no broker")
	}
	return c.Brokers[ids[rand.IntN(len(ids))]], nil
}
