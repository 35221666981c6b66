package kafkaproduce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// Txn makes one transactional id's coordinator calls: InitProducerId,
// AddPartitionsToTxn, EndTxn and FindCoordinator. Each method is one
// round trip that returns the broker's refusal as its kafka.Error,
// wrapped; the caller retries, with the classes in codes.go to tell
// when (franz-go's txn, without the loop, which is the relay's own).
type Txn struct {
	// Client carries the requests (kafka-go routes each to the
	// transactional id's coordinator).
	Client *kafka.Client
	// ID is the transactional id.
	ID string
	// Timeout is the transaction.timeout.ms InitProducerId asks for.
	Timeout time.Duration
}

// TopicPartition names one partition of a topic.
type TopicPartition struct {
	Topic     string
	Partition int
}

// InitProducerID takes the transactional id's producer id and a new epoch,
// which fences every earlier producer of the id: the coordinator completes
// or aborts the transaction such a producer left open.
func (t Txn) InitProducerID(ctx context.Context) (ProducerID, error) {
	res, err := t.Client.InitProducerID(ctx, &kafka.InitProducerIDRequest{
		TransactionalID: t.ID, TransactionTimeoutMs: int(t.Timeout / time.Millisecond), ProducerID: -1, ProducerEpoch: -1,
	})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err == nil && res.Producer == nil {
		err = errors.New("InitProducerId: no producer id in the answer")
	}
	if err != nil {
		return ProducerID{}, err
	}
	return ProducerID{ID: int64(res.Producer.ProducerID), Epoch: int16(res.Producer.ProducerEpoch)}, nil
}

// AddPartitions adds parts to pid's open transaction (AddPartitionsToTxn).
// err is the request's failure; failed holds each partition the broker
// refused (nil when every one was added). When one partition fails Kafka
// adds none of the request's and answers the others
// ErrOperationNotAttempted. Doctor's probe calls it under producer id -1,
// which the coordinator refuses without a change once it has authorized
// the transactional id and every topic.
func (t Txn) AddPartitions(ctx context.Context, pid ProducerID, parts []TopicPartition) (failed map[TopicPartition]error, err error) {
	topics := map[string][]kafka.AddPartitionToTxn{}
	for _, p := range parts {
		topics[p.Topic] = append(topics[p.Topic], kafka.AddPartitionToTxn{Partition: p.Partition})
	}
	res, err := t.Client.AddPartitionsToTxn(ctx, &kafka.AddPartitionsToTxnRequest{
		TransactionalID: t.ID, ProducerID: int(pid.ID), ProducerEpoch: int(pid.Epoch), Topics: topics,
	})
	if err != nil {
		return nil, err
	}
	for topic, ps := range res.Topics {
		for _, pr := range ps {
			if pr.Error == nil {
				continue
			}
			if failed == nil {
				failed = map[TopicPartition]error{}
			}
			failed[TopicPartition{topic, pr.Partition}] = pr.Error
		}
	}
	for _, p := range parts {
		if _, ok := res.Topics[p.Topic]; !ok {
			return nil, fmt.Errorf("AddPartitionsToTxn: no answer for topic %s", p.Topic)
		}
	}
	return failed, nil
}

// End commits or aborts pid's open transaction (EndTxn). A retried commit
// the coordinator already completed is answered with success.
func (t Txn) End(ctx context.Context, pid ProducerID, commit bool) error {
	res, err := t.Client.EndTxn(ctx, &kafka.EndTxnRequest{TransactionalID: t.ID, ProducerID: int(pid.ID), ProducerEpoch: int(pid.Epoch), Committed: commit})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	return err
}

// FindCoordinator names the transactional id's coordinator broker. On a
// cluster without transactions so far it makes the brokers create
// __transaction_state; it proves DESCRIBE on the transactional id.
func (t Txn) FindCoordinator(ctx context.Context) (int, error) {
	res, err := t.Client.FindCoordinator(ctx, &kafka.FindCoordinatorRequest{Addr: t.Client.Addr, Key: t.ID, KeyType: kafka.CoordinatorKeyTypeTransaction})
	if err == nil && res.Error != nil {
		err = res.Error
	}
	if err != nil {
		return -1, fmt.Errorf("FindCoordinator: %w", err)
	}
	return res.Coordinator.NodeID, nil
}
