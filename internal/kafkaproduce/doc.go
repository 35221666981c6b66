// Package kafkaproduce is the write side of the Kafka protocol, behind one
// boundary: the producer's identity (producer id, epoch and per-partition
// sequence numbers), the record-batch encoding, the produce round trip per
// leader, and the InitProducerId round trip. Package publisher keeps what
// is the relay's own: routing, lanes, poison events, the quarantine and
// exactly-once ranges; it calls this package for everything that goes on
// the wire.
//
// It is shaped after franz-go's producer: the Producer owns identity and
// sequences, batches are encoded per partition (AppendBatch), and the Sink
// merges the partitions' batches into one produce request per leader
// broker. The read side, internal/kafkafetch, is its counterpart for
// fetching. Nothing here knows about outbox events. Package producetest is
// a fake broker whose answers tests script.
//
// # Why its own encoder
//
// kafka-go's protocol.RecordSet writes producer id, epoch and base
// sequence as -1, which makes every batch non-idempotent; its rawproduce
// request takes a record batch encoded by the caller instead. The format
// is small and fixed (KIP-98, "Message format" in Kafka's protocol
// guide); DecodeBatch reads it back with kafka-go's decoder, which fake
// brokers in tests use.
package kafkaproduce
