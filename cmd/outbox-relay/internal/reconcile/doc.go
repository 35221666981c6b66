// Package reconcile answers "did every event reach Kafka, and did the
// consumer process it?" after an incident, independently of the relay's own
// bookkeeping (slot, checkpoints): it compares the events committed to the
// outbox table in a time window with the records in Kafka, read back from
// the topics by timestamp, and optionally with one consumer's inbox
// (processed_events and inbox_dead_letter).
//
// Memory does not grow with the window: the event ids of Kafka's records
// are streamed into a temporary table on the outbox connection and compared
// in SQL, and the consumer's inbox is looked up in chunks. Events committed
// in the last Config.Settle are left out, since they may still be in
// flight. The outcome is a Report; Report.Err is ErrMissing (exit 3 in the
// binary) when anything is missing.
//
// reconcile never builds a Kafka client itself: Deps carries the builders
// of the binary's one Kafka configuration, so brokers, TLS, SASL and
// timeouts are those of every other command.
package reconcile
