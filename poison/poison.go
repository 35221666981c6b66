// Package poison is the vocabulary the relay and the inbox share for a
// poison event: an event that can never be published (Kafka rejects it for
// good, or it cannot become a record) or never be applied (its handler
// fails permanently). One Policy decides what such an event does to the
// stream on both sides, one HaltError stops either of them, and one mark,
// Permanent, says that retrying cannot help.
//
// Why one package: the two ends of the outbox make the same promise (order
// per aggregate, nothing lost, no silent skip), so a poison event is
// handled alike at both ends, and an operator reads the same words in the
// relay's and the inbox's configuration, logs and docs.
package poison

import (
	"errors"
	"fmt"
)

// Policy is what a poison event does to the stream it is in.
type Policy string

const (
	// Quarantine dead-letters the poison event (status dead) and parks
	// every later event of its aggregate (status parked), in order, until
	// an operator retries or discards it; every other aggregate flows
	// on. The zero Policy means Quarantine.
	Quarantine Policy = "quarantine"
	// Halt stops the stream before the poison event with its position
	// held (the relay's slot position, the inbox's offset): nothing after
	// it is published or applied until it is fixed. For teams that want
	// a human on every such event.
	Halt Policy = "halt"
)

// ParsePolicy validates a policy name; "" is Quarantine.
func ParsePolicy(s string) (Policy, error) {
	switch p := Policy(s); p {
	case "":
		return Quarantine, nil
	case Quarantine, Halt:
		return p, nil
	}
	return "", fmt.Errorf("poison policy %q: use %s or %s", s, Quarantine, Halt)
}

// HaltError is the error a stream stops with under Halt.
type HaltError struct {
	// EventID and AggregateID name the poison event.
	EventID, AggregateID string
	// Reason says why it is poison.
	Reason string
	// Held is what the stop keeps in place so that nothing is lost, e.g.
	// "the slot position" or "its offset".
	Held string
}

func (e *HaltError) Error() string {
	return fmt.Sprintf("poison event %s (aggregate %s): %s; the poison policy is halt, so the stream stops with %s held "+
		"(fix the event or its handling and restart, or use the quarantine policy to dead-letter it and let other aggregates go on)",
		e.EventID, e.AggregateID, e.Reason, e.Held)
}

// Permanent marks err as a failure retrying cannot fix: the event it is
// about is poison at once, without the retries a transient failure gets.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent or is a *HaltError.
func IsPermanent(err error) bool {
	var p *permanentError
	var h *HaltError
	return errors.As(err, &p) || errors.As(err, &h)
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
