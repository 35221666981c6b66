package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
)

// The idempotent producer starts with InitProducerId without a
// transactional id: the broker hands out a producer id, which the relay
// then puts in each batch with per-partition sequence numbers. A broker
// with an authorizer answers it only for a principal with IDEMPOTENT_WRITE
// on the cluster (Kafka < 3.0) or WRITE on some topic (3.0+); without that
// every write of an idempotent relay fails, so doctor asks for a producer
// id just as the relay does. The id it takes writes nothing, so no
// partition keeps state for it.

// producerSession is the producer id and epoch InitProducerId answered.
type producerSession struct {
	id    int64
	epoch int16
}

// initProducerID asks a broker of c's cluster for a producer id without a
// transactional id, as the idempotent producer does at start-up.
func initProducerID(ctx context.Context, c *kafka.Client) (producerSession, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr := c.Transport
	if tr == nil {
		tr = kafka.DefaultTransport
	}
	m, err := tr.RoundTrip(ctx, c.Addr, &idempotentInit{ProducerID: -1, ProducerEpoch: -1})
	if err != nil {
		return producerSession{}, fmt.Errorf("InitProducerId: %w", err)
	}
	res, ok := m.(*initproducerid.Response)
	if !ok {
		return producerSession{}, fmt.Errorf("InitProducerId: unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return producerSession{}, fmt.Errorf("InitProducerId: %w", kafka.Error(res.ErrorCode))
	}
	return producerSession{id: res.ProducerID, epoch: res.ProducerEpoch}, nil
}

// idempotentInit is an InitProducerId request without a transactional id
// that kafka-go's Transport sends straight to a broker. Its own
// initproducerid.Request is a protocol.TransactionalMessage, so the
// Transport first asks FindCoordinator for the coordinator of the empty
// transactional id: on a cluster without transactions that creates the
// 50-partition __transaction_state topic (doctor changes nothing) and the
// request then fails with COORDINATOR_LOAD_IN_PROGRESS while it loads,
// although any broker answers a null transactional id itself. The type
// has initproducerid.Request's fields (so kafka-go encodes it as that
// request, by the API key's registered layout; the test compares the
// bytes) and, instead of its Transaction method, a Broker method
// (protocol.BrokerMessage) that picks the broker.
type idempotentInit initproducerid.Request

// ApiKey is InitProducerId's (protocol.Message).
func (r *idempotentInit) ApiKey() protocol.ApiKey { return protocol.InitProducerId }

// Broker picks the broker of the lowest id, so that repeated runs ask the
// same one (protocol.BrokerMessage).
func (r *idempotentInit) Broker(c protocol.Cluster) (protocol.Broker, error) {
	ids := c.BrokerIDs()
	if len(ids) == 0 {
		return protocol.Broker{}, errors.New("the metadata names no broker")
	}
	return c.Brokers[slices.Min(ids)], nil
}

// evalIdempotence adds the idempotent producer's finding: on (idempotent)
// it passes when InitProducerId gave a producer id (pid, err), fails when
// the broker refused the principal, and warns on any other error; off, it
// warns that a retried batch may be stored twice.
func evalIdempotence(idempotent bool, pid producerSession, err error, r *Report) {
	const check = "idempotent producer"
	switch {
	case !idempotent:
		r.add(check, Warn, "off (--idempotent=false): writes are not idempotent, a retried produce request may store its batch twice",
			"run with --idempotent (the default) once the relay's principal may write idempotently (docs/kafka.md)")
	case errors.Is(err, kafka.ClusterAuthorizationFailed) || errors.Is(err, kafka.TransactionalIDAuthorizationFailed):
		r.add(check, Fail, "the relay's principal may not write idempotently: "+err.Error(),
			"grant IDEMPOTENT_WRITE on the cluster (Kafka < 3.0) or WRITE on the outbox topics (3.0+), "+
				"or run with --idempotent=false (retried writes may then be duplicated)")
	case err != nil:
		r.add(check, Warn, "cannot check that the relay's principal may write idempotently: "+err.Error(),
			"check the brokers' logs; if they refuse InitProducerId for good, run with --idempotent=false (retried writes may then be duplicated)")
	default:
		r.add(check, Pass, fmt.Sprintf("InitProducerId answered producer id %d, epoch %d: the relay's principal may write idempotently", pid.id, pid.epoch), "")
	}
}
