package outbox

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// Event is one row of the outbox table. The relay turns it into one Kafka
// record: the topic comes from AggregateType, the key from AggregateID (so
// all events of one aggregate stay in order on one partition) and the
// value from Payload.
type Event struct {
	// EventID identifies the event end to end and lets consumers
	// deduplicate redeliveries. Leave it zero to have Append assign a
	// UUIDv7, which is time-ordered and so keeps the primary key index
	// append-mostly.
	EventID uuid.UUID
	// AggregateType names the kind of entity the event is about, e.g.
	// "order". Required.
	AggregateType string
	// AggregateID identifies the entity, e.g. the order id. Required.
	AggregateID string
	// AggregateVersion is the entity's version after the change, letting
	// consumers detect gaps and reordering. Must not be negative.
	AggregateVersion int64
	// EventType names what happened, e.g. "order.confirmed". Required.
	EventType string
	// SchemaVersion is the version of the payload's schema for this
	// EventType, so consumers can evolve parsing. Must be positive.
	SchemaVersion int
	// Payload is the event body. With the default JSON payload column it
	// must be valid JSON (PostgreSQL would reject it anyway, but later and
	// with a less helpful message); note that a jsonb column normalises
	// whitespace and key order. With WithBinaryPayload it is opaque bytes.
	Payload []byte
	// Headers become Kafka record headers. Optional; keys must be
	// non-empty.
	Headers map[string]string
}

// ErrInvalidEvent is the sentinel every *ValidationError wraps, so callers
// can tell a bad event (a bug in the caller, not worth retrying) from a
// database error with errors.Is.
var ErrInvalidEvent = errors.New("invalid outbox event")

// ValidationError lists everything wrong with an event that Append refused
// to write.
type ValidationError struct {
	// EventID is the event's id as given (zero if Append would have
	// assigned one).
	EventID uuid.UUID
	// Problems are human-readable, one per field.
	Problems []string
}

// Error names every problem at once, so one failed call tells the caller
// all there is to fix.
func (e *ValidationError) Error() string {
	id := ""
	if e.EventID != uuid.Nil {
		id = " " + e.EventID.String()
	}
	return fmt.Sprintf("%s%s: %s", ErrInvalidEvent, id, strings.Join(e.Problems, "; "))
}

// Unwrap returns ErrInvalidEvent.
func (e *ValidationError) Unwrap() error { return ErrInvalidEvent }
