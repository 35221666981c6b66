// Package positions is what package relay needs of package publisher's
// exactly-once mode and no library user does: starting its transactions,
// and where in the positions topic the position records are.
//
// Starting is the relay's step. It fences the previous leader, after which
// the relay reads the newest committed position record, before it starts
// streaming. As a Publisher method it would be API that only the relay
// calls, in an order only the relay knows. So package publisher hands it
// over here (Begin) instead of exporting it. Go has no other way to let
// one package call another's unexported code, and the assignment happens
// once, in the publisher's init, with nothing changing it afterwards
// (cmd/outbox-relay/internal/pgauth does the same for its RDSIAM).
package positions

import (
	"context"

	"github.com/segmentio/kafka-go"
)

// Topic is the positions topic as a publisher found it when its
// transactions began.
type Topic struct {
	// Partition is the partition of the publisher's own position
	// records (the key of its TransactionConfig.PositionKey).
	Partition int
	// Partitions is the topic's partition count, which the records carry:
	// partitions added later move a key (see Partition).
	Partitions int
}

// PartitionOf is the partition of the records of key; -1 when the
// topic's partition count is unknown.
func (t Topic) PartitionOf(key []byte) int {
	if t.Partitions <= 0 {
		return -1
	}
	return Partition(key, t.Partitions)
}

// Partition is the partition of key among n: the Java client's murmur2, as
// for every record the publisher keys, so a reader finds a key where any
// client put it.
func Partition(key []byte, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: key}, parts...)
}

// Begin takes the transactional producer id of pub, a
// *publisher.Publisher in exactly-once mode, and must succeed before its
// first Publish. pub is an any because package publisher imports this one.
// Its InitProducerId fences every earlier producer of the transactional
// id: the coordinator completes or aborts the transaction such a producer
// left open, and refuses it from then on. So once Begin returns, the
// positions topic's newest committed record is final, and the caller
// reads it afterwards. Begin creates the topic when it is missing (one
// partition, compacted). In at-least-once mode it does nothing: the
// Topic's Partition is -1 and its Partitions 0.
//
// Package publisher sets Begin in its init.
var Begin func(ctx context.Context, pub any) (Topic, error)
