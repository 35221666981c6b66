package publisher

// This file holds the registry formats' lookup (issue 48): which
// registered schema an event is encoded with, and what a registry's
// answer makes of the event. It has no goroutine: message calls it on the
// goroutine that builds the record (the replication goroutine's Publish,
// the quarantine's forward, a SyncWriter's caller).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Schemas is the schema registry as the publisher reads it, for the
// registry record formats (record.Format.Registry). Implementations
// cache: a call for a schema already fetched costs no request, and keeps
// answering while the registry is down. A subject, version or id the
// registry does not have is an error that wraps record.ErrSchemaNotFound
// (the event is poison); any other error is transient (the publisher
// retries, never dead-letters).
type Schemas interface {
	// Schema returns the schema registered as ref, parsed.
	Schema(ctx context.Context, ref record.SchemaRef) (*record.Schema, error)
	// Registered reports whether schema id is a version of subject: a
	// payload the application framed itself passes unchanged only then.
	Registered(ctx context.Context, subject string, id uint32) (bool, error)
}

// WithSchemas gives the publisher the registry the registry record
// formats encode with; without it such a format is a configuration error.
func WithSchemas(s Schemas) Option {
	return optionFunc(func(o *options) { o.schemas = s })
}

// ReasonSchemaNotFound is the reason of an event whose subject or version
// the registry does not have: registering it and `dlq retry` delivers it.
const ReasonSchemaNotFound = "schema_not_found"

// ReasonSchemaInvalid is the reason of an event whose registered schema
// the relay cannot encode with (record.ErrSchemaInvalid): registered
// versions never change, so only registering a usable one (with
// --schema-version latest) or discarding the event ends it.
const ReasonSchemaInvalid = "schema_invalid"

// SchemaUnavailableError is a registry that did not answer an event's
// lookup (unreachable, a timeout, a 5xx): transient. Publish returns it
// and the relay restarts its stream after a backoff, the slot position
// held; nothing is dead-lettered.
type SchemaUnavailableError struct {
	EventID string
	Ref     record.SchemaRef
	Err     error
}

func (e *SchemaUnavailableError) Error() string {
	return fmt.Sprintf("schema registry: subject %s version %s for event %s: %v", e.Ref.Subject, e.Ref.Version, e.EventID, e.Err)
}

func (e *SchemaUnavailableError) Unwrap() error { return e.Err }

// registered builds ev's record in a registry format: the schema of its
// subject and version from the registry, then the record. A poison event
// is an *EventError with its reason; a registry that does not answer, a
// *SchemaUnavailableError.
func (p *Publisher) registered(ctx context.Context, topic string, ev *replication.WALEvent) (kafka.Message, string, error) {
	poisoned := func(code, reason string) (kafka.Message, string, error) {
		return kafka.Message{}, code, &EventError{EventID: ev.EventID, AggregateID: ev.AggregateID, Reason: reason}
	}
	ref, err := p.cfg.Record.SchemaRef(topic, &ev.Row)
	if err != nil {
		var ee *record.EncodeError
		if errors.As(err, &ee) {
			return poisoned(ee.Code, ee.Reason)
		}
		return kafka.Message{}, record.CodeSchema, err
	}
	unavailable := func(err error) (kafka.Message, string, error) {
		return kafka.Message{}, "schema_registry", &SchemaUnavailableError{EventID: ev.EventID, Ref: ref, Err: err}
	}
	if id, framed := record.FramedSchemaID(ev.Payload); framed {
		ok, err := p.cfg.Schemas.Registered(ctx, ref.Subject, id)
		switch {
		case errors.Is(err, record.ErrSchemaNotFound) || err == nil && !ok:
			return poisoned(ReasonSchemaNotFound, fmt.Sprintf("the payload is framed with schema id %d, which is not a version of subject %s", id, ref.Subject))
		case err != nil:
			return unavailable(err)
		}
	}
	s, err := p.cfg.Schemas.Schema(ctx, ref)
	switch {
	case errors.Is(err, record.ErrSchemaNotFound):
		return poisoned(ReasonSchemaNotFound, fmt.Sprintf("subject %s version %s is not registered: register it, then dlq retry (%v)", ref.Subject, ref.Version, err))
	case errors.Is(err, record.ErrSchemaInvalid):
		return poisoned(ReasonSchemaInvalid, fmt.Sprintf("subject %s version %s cannot be used: %v", ref.Subject, ref.Version, err))
	case err != nil:
		return unavailable(err)
	}
	msg, err := p.enc.EncodeRegistered(topic, &ev.Row, ref, s)
	if err == nil && p.cfg.Record.KeySchema {
		if code, poison, err := p.registeredKey(ctx, topic, ev, &msg); err != nil {
			if poison {
				return poisoned(code, err.Error())
			}
			return kafka.Message{}, code, err
		}
	}
	if err != nil {
		var ee *record.EncodeError
		if errors.As(err, &ee) {
			return poisoned(ee.Code, ee.Reason)
		}
		return kafka.Message{}, record.CodeSchema, err
	}
	return msg, "", nil
}

// registeredKey frames msg's key with the key subject's latest schema
// (record.Config.KeySchema). A key subject the registry does not have, or
// whose schema is not a string's, is poison with the value's reasons
// (poison true, code the reason, err's text the dead letter's); a
// registry that does not answer is a *SchemaUnavailableError. The
// partition does not change: the router hashes the aggregate_id, not the
// framed key.
func (p *Publisher) registeredKey(ctx context.Context, topic string, ev *replication.WALEvent, msg *kafka.Message) (code string, poison bool, err error) {
	ref := p.cfg.Record.KeyRef(topic)
	s, err := p.cfg.Schemas.Schema(ctx, ref)
	switch {
	case errors.Is(err, record.ErrSchemaNotFound):
		return ReasonSchemaNotFound, true, fmt.Errorf("key subject %s version %s is not registered: register the key schema, then dlq retry (%v)", ref.Subject, ref.Version, err)
	case errors.Is(err, record.ErrSchemaInvalid):
		return ReasonSchemaInvalid, true, fmt.Errorf("key subject %s version %s cannot be used: %v", ref.Subject, ref.Version, err)
	case err != nil:
		return "schema_registry", false, &SchemaUnavailableError{EventID: ev.EventID, Ref: ref, Err: err}
	}
	if err := p.enc.EncodeKey(msg, &ev.Row, ref, s); err != nil {
		var ee *record.EncodeError
		if !errors.As(err, &ee) {
			return record.CodeSchema, false, err
		}
		if errors.Is(err, record.ErrSchemaInvalid) {
			return ReasonSchemaInvalid, true, errors.New(ee.Reason)
		}
		return ee.Code, true, errors.New(ee.Reason)
	}
	return "", false, nil
}

// forwardable waits out a registry that does not answer for an event the
// quarantine released, with the publisher's backoff, and returns its
// record; false when the publisher closes first.
func (p *Publisher) forwardable(rec *outgoing) (msg kafka.Message, reason string, err error, ok bool) {
	for attempt := 1; ; attempt++ {
		msg, reason, err = p.message(p.ctx, rec.msg.Topic, rec.ev)
		var su *SchemaUnavailableError
		if !errors.As(err, &su) {
			return msg, reason, err, true
		}
		p.m.PublishError(reason, string(Transient))
		d := p.backoff(attempt)
		p.log.Warn("schema registry unavailable, retrying", slog.String("stage", "quarantine"), slog.String("event_id", rec.ev.EventID),
			slog.String("aggregate_id", rec.ev.AggregateID), slog.String("event_type", rec.ev.EventType), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return msg, reason, err, false
		}
	}
}
