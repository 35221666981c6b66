package outbox

import (
	"errors"
	"fmt"
	"strconv"
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
	// Priority decides whether back-pressure may refuse the event (see
	// WithBackpressure). It is not stored in the table: only Append reads
	// it. The zero value, PriorityCritical, keeps the behaviour of a
	// Writer without back-pressure.
	Priority Priority
}

// Priority says how much an event matters when the database's disk is at
// risk. Back-pressure (WithBackpressure) refuses low-priority events once
// HealthConfig.Soft is crossed, so a service can shed what it can afford
// to lose (views, analytics, notifications) and keep what it cannot.
type Priority int

const (
	// PriorityCritical is the zero value: never refused by the soft
	// budget, only by a Hard budget if one is configured and crossed. The
	// default, so that events keep being written unless the caller says
	// otherwise.
	PriorityCritical Priority = iota
	// PriorityLow marks a non-critical event: Append refuses it with
	// ErrBackpressure once the soft budget is crossed.
	PriorityLow
)

// String returns "critical" or "low" (for logs and errors).
func (p Priority) String() string {
	switch p {
	case PriorityCritical:
		return "critical"
	case PriorityLow:
		return "low"
	}
	return "Priority(" + strconv.Itoa(int(p)) + ")"
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
