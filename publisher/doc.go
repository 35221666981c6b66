// Package publisher writes outbox events to Kafka with acks=all, keyed by
// aggregate, partitioned like the Java client (murmur2), without ever
// letting a later batch of a partition overtake an earlier one.
//
// Package publisher is part of the engine under package relay and has no
// compatibility promise of its own: relay is what users import.
//
// kafka-go's Writer keeps one batch in flight per partition, but once a
// batch fails for good it sends the next queued batch anyway; resending the
// failed one later would reorder the partition. So the publisher owns the
// ordering: a router per topic assigns each event its partition
// (kafka.Murmur2Balancer over the topic's partition count), and a lane per
// partition sends exactly one batch at a time (acks=all), retrying it with
// backoff until it is acknowledged. Only then are its events reported to the Acker and the next
// batch taken. Batching is natural: whatever queued up while a request was
// in flight is the next batch, so a busy partition sends large batches.
//
// Lanes do not send their own requests: the relay's Kafka write boundary
// merges the batches handed to it at the same moment into one
// multi-partition produce request per leader broker, as the Java producer
// does, with a few such requests in flight and a short linger
// (Config.Linger). At live rates a lane batch is a handful of records, and
// a request per partition per round trip cost the broker more CPU than
// the records did. Each batch still gets its own partition's outcome, and
// a lane still waits for it, so order is unchanged.
//
// The lane forms batches itself instead of going through the Writer
// because the Writer would re-batch them: it waits its BatchTimeout on every
// partial batch and allocates a buffer of BatchSize messages per call,
// which profiling showed to be a fifth of the relay's CPU at steady load.
// The operator commands publish through SyncWriter, a plain Writer.
//
// The batches are encoded by the relay itself and sent with kafka-go's
// rawproduce request, because its RecordSet encoder leaves out the
// producer id: with Config.Idempotent (the relay's default) the publisher
// takes a producer id and numbers each partition's batches, so the broker
// discards a retried batch it already stored. A retry whose leader moved
// refreshes the transport's metadata first and waits at most 250 ms
// (Publisher.beforeRetry), so recovery follows the cluster's election
// instead of the exponential backoff.
package publisher
