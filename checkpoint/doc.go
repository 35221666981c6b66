// Package checkpoint decides how far the replication slot may be confirmed.
//
// The relay publishes events asynchronously, so Kafka acknowledgements come
// back in any order across partitions. A Tracker keeps the transactions it has
// seen in WAL order and reports as flushed the TransactionEndLSN of the last
// transaction such that it and every transaction before it are fully
// acknowledged. Confirming anything later would let PostgreSQL discard WAL
// for events Kafka never stored; confirming less only causes redelivery.
//
// The Tracker is also the relay's in-flight window: it counts unacknowledged
// events and bytes, and the replication stream stops reading while the window
// is full. That is what keeps memory independent of transaction size and of
// the backlog.
//
// The flush position moves only at transaction ends, so the Tracker also
// knows, per event (Seq), which acknowledgements arrived, and reports the
// acknowledged prefix of the oldest unconfirmed transaction as a Partial:
// a restart inside a large transaction then skips what Kafka has instead
// of re-sending all of it.
package checkpoint
