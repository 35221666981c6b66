// Package inbox is the consumer side of the transactional outbox: it reads
// the events outbox-relay publishes, with a kafka-go consumer group, and
// applies each event's effect once per consumer.
//
// # The guarantee, exactly
//
// Delivery is at-least-once, not exactly-once: the relay redelivers after a
// crash, Kafka redelivers after a consumer crash or a rebalance, and an
// operator may replay a topic. The inbox makes the *effect* happen once per
// consumer name, as long as the effect lives in the consumer's PostgreSQL
// database:
//
//  1. For each record, one transaction: take the aggregate's advisory lock,
//     INSERT INTO processed_events (consumer, event_id, …) ON CONFLICT DO
//     NOTHING RETURNING, and only if a row came back run the Handler with
//     the same transaction; then COMMIT. A redelivered event finds its row
//     and is skipped and counted (Stats.Duplicates,
//     outbox_relay_inbox_duplicates_absorbed_total).
//  2. If the handler fails (an error, or an expectation such as
//     ExpectRows on a version-guarded UPDATE), the whole transaction rolls
//     back: an event that was not applied is never marked processed.
//  3. The record's offset is committed to Kafka only after that COMMIT,
//     batched (Config.CommitInterval, Config.CommitBatch). Events are
//     handled one at a time in fetch order, so a committed offset is never
//     past an event whose outcome is unknown. A crash between the COMMIT
//     and the offset commit causes a redelivery, which step 1 absorbs.
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
// to Config.MaxAttempts; Permanent errors are not retried. PostgreSQL being
// unavailable is retried without limit and never blamed on an event.
// A permanently failing event follows Config.Policy:
//
//   - PolicyWait (default): the event is written to inbox_dead_letter
//     (status dead, with the reason and attempts) and every later event of
//     its aggregate is parked there in arrival order, so the aggregate
//     waits while every other aggregate goes on — the relay's rule.
//     Consumer.Retry re-applies the aggregate's events in order;
//     Consumer.Discard drops one (with a recorded reason) and retries the
//     rest.
//   - PolicyHalt: Run returns a *HaltError before the event's offset.
//
// # Order
//
// Kafka keeps order per partition and the relay keys records by
// aggregate_id, so one consumer instance sees an aggregate's events in
// order. During a consumer-group rebalance records already fetched by the
// previous owner of a partition may be handled while the new owner starts:
// the inbox still applies each effect once (the second transaction waits
// on the first one's processed_events row), but a handler that depends on
// order should check aggregate_version (ExpectRows on
// "WHERE version = $v - 1", or ApplyNewer).
//
// # Projections without the inbox
//
// ApplyNewer upserts a row only if the event's aggregate_version is newer
// than the stored one. For pure state snapshots that is enough and cheaper;
// its documentation lists when it is not.
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
