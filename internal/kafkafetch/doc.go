// Package kafkafetch reads one Kafka topic partition through kafka-go's
// protocol layer, with the client side of Kafka transactions that
// kafka-go's Reader lacks.
//
// kafka-go v0.4.51 sends IsolationLevel on its fetch requests, so with
// read_committed the broker stops at the last stable offset, but the
// client never filters what lies below it: the fetch response's list of
// aborted transactions is parsed and dropped, so the records of aborted
// transactions are delivered as if committed, and control batches (the
// commit and abort markers a transaction coordinator writes) come out of
// kafka.Reader as ordinary messages (segmentio/kafka-go issue #1332). A
// consumer that applies effects would apply aborted writes and choke on
// markers as soon as a producer writes in transactions.
//
// PartitionReader sends protocol/fetch requests with a kafka.Transport
// and decodes the responses the way the Java client's CompletedFetch does:
//
//   - control batches are never delivered (in either isolation level); the
//     next fetch offset moves past them;
//   - with read_committed (the default), the response's aborted
//     transactions, ordered by first offset, are moved into a set of
//     aborted producer ids as the batches reach their first offset; a
//     transactional batch of a producer in the set is skipped, and the
//     producer's ABORT marker takes it out of the set again, so a
//     producer's later, committed transaction in the same response is
//     delivered;
//   - records below the requested offset (a fetch may return a batch that
//     starts earlier) are skipped; skipped records still advance the next
//     fetch offset.
//
// One goroutine fetches at most one response ahead of the caller, so that
// applying a batch overlaps the next fetch; Close stops and waits for it,
// and closes every connection the reader opened.
package kafkafetch
