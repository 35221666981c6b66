// Package inbox is the consumer side of the transactional outbox: it reads
// the events outbox-relay publishes, with a kafka-go consumer group, and
// applies each event's effect once per consumer.
//
// Records are decoded with package record, the relay's record format (the
// relay encodes with the same package): handlers receive *record.Event,
// Config.RecordFormat is a record.Format (empty: detected per record), and
// a record that is not an outbox event (*record.DecodeError) is
// dead-lettered like a permanent handler failure.
//
// # Configuration
//
// New takes a Config, what the consumer does (its topics, database,
// handler, batches, retries, poison policy), and Options, where its logs,
// metrics and spans go: WithLogger, WithMetrics (inboxprom.New gives the
// Prometheus collectors), WithTracerProvider and WithPropagator, the names
// the relay and the outbox use for the same things. Every Config field's
// zero value is its default, and a negative value turns off a knob that
// can be turned off (Retention, ShutdownTimeout's grace period). Without
// options the consumer logs and measures nothing and traces with the
// global OpenTelemetry provider and propagator.
//
// # The guarantee, exactly
//
// Delivery is at-least-once, not exactly-once: the relay redelivers after a
// crash, Kafka redelivers after a consumer crash or a rebalance, and an
// operator may replay a topic. The inbox makes the *effect* happen once per
// consumer name, as long as the effect lives in the consumer's PostgreSQL
// database:
//
//  1. Records are applied in batches, one transaction per batch: take the
//     advisory locks of the batch's aggregates (one statement, in a fixed
//     order), INSERT INTO processed_events (consumer, event_id, …) SELECT …
//     FROM unnest(…) ON CONFLICT DO NOTHING RETURNING event_id, and run the
//     handler only for the events that came back, in record order, with
//     the same transaction; then COMMIT. A redelivered event (also one
//     repeated inside a batch) finds its row and is skipped and counted
//     (Stats.Duplicates, outbox_relay_inbox_duplicates_absorbed_total).
//  2. If the handler fails (an error, or an expectation such as
//     ExpectRows on a version-guarded UPDATE), the whole transaction rolls
//     back: an event that was not applied is never marked processed. The
//     batch is then applied again around the failing event (for a
//     BatchHandler: in halves until it is alone), so that only that event
//     meets the retry and dead-letter policy and every other one is
//     applied once.
//  3. The record's offset is committed to Kafka only after that COMMIT,
//     batched (Config.CommitInterval, Config.CommitBatch). Each partition
//     is applied in order, so a committed offset is never past an event
//     whose outcome is unknown. A crash between the COMMIT and the offset
//     commit causes a redelivery, which step 1 absorbs.
//
// # Batches and parallelism
//
// Every assigned partition has its own reader and worker, and up to
// Config.Concurrency partitions apply a batch at the same time; records of
// one partition, and so of one aggregate, are applied in order. A batch is
// up to Config.BatchSize records (default 500), or what arrived within
// Config.BatchLinger (default 5ms) of its first record. Memory is bounded
// by the batch size and, per assigned partition, the reader's fetch
// responses (the one being applied and at most one fetched ahead, each up
// to MaxBytes, 256 KiB by default), whatever the backlog. A rebalance ends
// the consumer-group generation: each worker finishes the batch it is
// applying, the final offsets are committed, and only then are the
// partitions released. When Run returns, none of its goroutines (workers,
// committers, the pruning loop) is left: the pool may be closed at once,
// and a Run started again in the same process never overlaps with the
// batches, offset commits or prunes of the one before.
//
// Handler is called once per event and fits most effects: one or two
// statements per event. BatchHandler receives the batch's fresh events at
// once, for set-based effects (INSERT … SELECT FROM unnest(…), UPDATE …
// FROM), which is several times faster for simple effects. Its checks
// compare with the batch: a version-guarded UPDATE over n events must
// change n rows (ExpectRows(tag, n)), and a mismatch fails the batch,
// whose halving then finds the event at fault.
//
// What it does not cover: effects outside the transaction (HTTP calls,
// e-mails, another database) can happen more than once; give them an
// idempotency key (the event ID) that the receiver dedupes on. Two
// different consumer names apply the effect once each. Deleting
// processed_events rows (Config.Retention) ends the dedupe for those
// events, which is why the retention may not be shorter than the replay
// window (CheckRetention).
//
// # Failures
//
// Handler errors are retried with exponential backoff and full jitter up
// to Config.MaxAttempts; errors marked with poison.Permanent (ExpectRows'
// among them) are not retried. PostgreSQL being unavailable is retried
// without limit and never blamed on an event. A permanently failing event
// is poison, and follows Config.Policy, a poison.Policy: the relay's
// vocabulary, so both ends of the outbox treat a poison event alike.
//
//   - poison.Quarantine (default): the event is written to
//     inbox_dead_letter (status dead, with the reason and attempts) and
//     every later event of its aggregate is parked there in arrival order,
//     so the aggregate waits while every other aggregate goes on — the
//     relay's rule. Consumer.Retry re-applies the aggregate's events in
//     order; Consumer.Discard drops one (with a recorded reason) and
//     retries the rest.
//   - poison.Halt: Run returns a *poison.HaltError before the event's
//     offset, which stays uncommitted: after a restart the event is
//     delivered again.
//
// # Order
//
// Kafka keeps order per partition and the relay keys records by
// aggregate_id, so one consumer instance sees an aggregate's events in
// order, and a rebalance hands a partition over only after its previous
// owner finished its batch. An owner that lost its membership without
// knowing it (a session timeout during a long pause) may still apply a
// batch while the new owner starts: the advisory locks serialize the two
// and the inbox still applies each effect once, but a handler that
// depends on order should check aggregate_version (ExpectRows on
// "WHERE version = $v - 1", or ApplyNewer).
//
// # Projections without the inbox
//
// ApplyNewer upserts a row only if the event's aggregate_version is newer
// than the stored one. For pure state snapshots that is enough and cheaper;
// its documentation lists when it is not.
//
// # Transactions
//
// The inbox reads read_committed: a producer that writes in Kafka
// transactions (the relay's exactly-once mode, a Kafka Streams or Java
// transactional producer) may abort one, explicitly or because it crashed
// mid-transaction and its successor's InitProducerId aborted it. Its
// records stay in the log, and a read_uncommitted consumer applies them
// although they never committed. So each partition is read up to the last
// stable offset, and the records of aborted transactions are dropped as
// the Java consumer drops them; records of open transactions wait until
// they commit (a long transaction holds its partition back, never
// another). The markers that end transactions (control batches) are
// never delivered to a handler, in either isolation level, and committed
// offsets move past them.
//
// kafka-go's Reader does not do this (it delivers aborted records, and the
// markers as records: segmentio/kafka-go issue #1332), so the inbox keeps
// kafka-go's consumer group for membership and offsets but reads each
// assigned partition with a fetcher of its own (internal/kafkafetch) over
// kafka-go's protocol layer, with Config.TuneReader's fetch settings and
// Dialer (TLS, SASL). A producer that never uses transactions costs
// nothing: without open transactions the last stable offset is the high
// watermark. TuneReader may still set kafka.ReadUncommitted.
//
// # Kafka 4.x
//
// kafka-go v0.4.51 negotiates JoinGroup v2 (older releases sent v1, which
// Kafka 4.0.0 rejected; 4.0.1 and 4.1 accept v0-v1 again), OffsetCommit v2
// and OffsetFetch v1, all supported by Kafka 4.1.1, on which the
// integration suite runs these consumer groups.
//
// # Tables
//
// Migrate creates processed_events and inbox_dead_letter in a schema of
// the consumer's own database, with their own version ledger: consumers do
// not live in the outbox's database.
package inbox
