// Package deadletter keeps poison events and quarantines their aggregates.
//
// A poison event is one that retrying cannot deliver: Kafka rejects it for
// good (too large, invalid topic, not authorized) or it cannot become a
// record at all (an empty aggregate_id, headers that are not an object of
// strings). Skipping it would be a silent loss; publishing the events of its
// aggregate that come after it would break the order consumers rely on.
// So the event is written, whole, to the dead-letter table with status
// "dead" before the slot is confirmed past it, and every later event of the
// same aggregate is written there with status "parked", in commit order,
// while all other aggregates keep flowing. An operator then decides: retry
// (re-publish the aggregate's open rows in order, lifting the quarantine) or
// discard the poison event with a recorded reason.
//
// The relay and the operator commands coordinate through a per-aggregate
// advisory lock: a retry holds it while it re-publishes, and the relay takes
// it before parking, so an event that arrives during a retry is published
// after the retried ones, never between them.
package deadletter
