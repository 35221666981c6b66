// Package publisher writes outbox events to Kafka with acks=all, keyed by
// aggregate, partitioned like the Java client (murmur2), without ever
// letting a later batch of a partition overtake an earlier one.
//
// kafka-go's Writer keeps one batch in flight per partition, but once a
// batch fails for good it sends the next queued batch anyway; resending the
// failed one later would reorder the partition. So the publisher owns the
// ordering: a router per topic assigns each event its partition, and a lane
// per partition hands the Writer exactly one batch at a time, sized to fit
// one produce request, retrying it with backoff until it is acknowledged.
// Only then are its events reported to the Acker and the next batch taken.
package publisher
