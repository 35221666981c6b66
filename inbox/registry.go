package inbox

// This file holds the consumer side of the schema registry formats
// (issue 48): a record whose value is in the Confluent wire format
// reaches the handler with its schema id, its subject, and its body
// decoded to JSON or left framed, the application's choice.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/outbox-relay/outbox-relay/fielderr"
	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/record"
)

// PayloadAs is what a handler gets as Event.Payload for a value in the
// Confluent wire format (Event.SchemaID set).
type PayloadAs string

// Payload modes.
const (
	// PayloadJSON decodes the body with the registered schema into JSON:
	// the form of the outbox row's payload, as a handler of the native
	// format reads it. It needs SchemaConfig.Registry. The empty mode is
	// this one.
	PayloadJSON PayloadAs = "json"
	// PayloadRaw leaves the framed value unchanged (magic byte, schema
	// id, Protobuf's message indexes, body) for an application that
	// decodes it itself, with Confluent's deserializers say. No registry
	// is needed.
	PayloadRaw PayloadAs = "raw"
)

// ParsePayloadAs validates a payload mode name; "" is PayloadJSON.
func ParsePayloadAs(s string) (PayloadAs, error) {
	switch p := PayloadAs(s); p {
	case "", PayloadJSON:
		return PayloadJSON, nil
	case PayloadRaw:
		return p, nil
	}
	return "", fmt.Errorf("payload mode %q: use json or raw", s)
}

// SchemaConfig is how the consumer reads values in the Confluent wire
// format: the records of the relay's registry formats (avro, protobuf,
// json-schema), or any framed value. Its zero value decodes nothing: a
// framed value reaches the handler as it is, with Event.SchemaID and
// Event.Subject set.
type SchemaConfig struct {
	// Registry is the schema registry the values' schema ids are looked
	// up in (the relay's --schema-registry-* settings). Required with
	// PayloadJSON and a registry RecordFormat. A schema is fetched once
	// per id and kept (an id's schema never changes), up to
	// Registry.CacheSize schemas; LatestTTL does not apply.
	Registry record.RegistryConfig
	// SubjectStrategy is the relay's --schema-subject-strategy: it names
	// Event.Subject (record.Config.SchemaRef); "" is record.SubjectTopic.
	SubjectStrategy record.SubjectStrategy
	// PayloadAs is what Event.Payload holds for a framed value; "" is
	// PayloadJSON.
	PayloadAs PayloadAs
}

// withDefaults is s with its modes named.
func (s SchemaConfig) withDefaults() SchemaConfig {
	if p, err := ParsePayloadAs(string(s.PayloadAs)); err == nil {
		s.PayloadAs = p
	}
	if v, err := record.ParseSubjectStrategy(string(s.SubjectStrategy)); err == nil {
		s.SubjectStrategy = v
	}
	return s
}

// validate adds the problems of c.Schemas to l: a registry format decoded
// to JSON needs the registry.
func (c Config) validateSchemas(l *fielderr.List) {
	s := c.Schemas
	if _, err := ParsePayloadAs(string(s.PayloadAs)); err != nil {
		l.Fail("Schemas.PayloadAs", string(s.PayloadAs), "use json or raw")
	}
	if _, err := record.ParseSubjectStrategy(string(s.SubjectStrategy)); err != nil {
		l.Fail("Schemas.SubjectStrategy", string(s.SubjectStrategy), "use topic, record or topic-record")
	}
	if s.Registry.URL == "" {
		if c.RecordFormat.Registry() && s.PayloadAs == PayloadJSON {
			l.Wrap("Schemas.Registry.URL", fmt.Errorf("%w with RecordFormat %s and Schemas.PayloadAs json: "+
				"the schema registry the relay writes with (or PayloadAs raw, to decode the values yourself)", ErrRequired, c.RecordFormat))
		}
		return
	}
	l.Nested("Schemas.Registry", s.Registry.Validate())
}

// schemaLookup is what the consumer needs of a registry client: the
// parsed schema of an id (schemareg.Client.Parsed, cached).
type schemaLookup interface {
	Parsed(ctx context.Context, id uint32) (*record.Schema, error)
}

// newSchemaLookup is the registry client of cfg, nil without a URL. It
// reports its requests and cache lookups to m (nil: to nothing).
func newSchemaLookup(cfg SchemaConfig, m schemareg.Metrics) (schemaLookup, error) {
	if cfg.Registry.URL == "" {
		return nil, nil
	}
	var opts []schemareg.Option
	if m != nil {
		opts = append(opts, schemareg.WithMetrics(m))
	}
	c, err := schemareg.New(cfg.Registry, opts...)
	if err != nil {
		return nil, fmt.Errorf("inbox: schema registry: %w", err)
	}
	return c, nil
}

// registryError is a schema lookup the registry could not answer: not
// the event's fault, so it is retried with backoff, and neither
// dead-lettered nor committed past.
type registryError struct{ err error }

func (e *registryError) Error() string { return "inbox: schema registry unavailable: " + e.err.Error() }
func (e *registryError) Unwrap() error { return e.err }

// schemaValue prepares a framed value (ev.SchemaID set) for the handler:
// it sets ev.Subject from the subject strategy and, with PayloadJSON and
// a registry, replaces ev.Payload with the body decoded to JSON. A schema
// id the registry does not have, a schema that cannot be used or a body
// that does not decode is a *record.DecodeError (dead-lettered like an
// undecodable record); a registry that does not answer is a
// *registryError (retried). ev is unchanged but for Subject on error.
func (c *Consumer) schemaValue(ctx context.Context, ev *record.Event) error {
	if ev.SchemaID == 0 {
		return nil
	}
	ev.Subject = c.subject(ev)
	if c.reg == nil || c.cfg.Schemas.PayloadAs == PayloadRaw {
		return nil
	}
	s, err := c.reg.Parsed(ctx, ev.SchemaID)
	if err != nil {
		if errors.Is(err, record.ErrSchemaNotFound) || errors.Is(err, record.ErrSchemaInvalid) {
			return c.valueError(ev, err)
		}
		return &registryError{err}
	}
	js, err := s.DecodeValue(ev.Payload)
	if err != nil {
		return c.valueError(ev, err)
	}
	ev.Payload = js
	return nil
}

// valueError is the DecodeError of ev's value, which err says cannot be
// decoded.
func (c *Consumer) valueError(ev *record.Event, err error) error {
	return &record.DecodeError{Topic: ev.Topic, Partition: ev.Partition, Offset: ev.Offset, Err: err,
		Reason: fmt.Sprintf("its value (schema id %d, subject %s) cannot be decoded: %v", ev.SchemaID, ev.Subject, err)}
}

// subject is the registry subject of ev's value schema by the configured
// strategy ("" when the strategy cannot name it).
func (c *Consumer) subject(ev *record.Event) string {
	rc := record.Config{SubjectStrategy: c.cfg.Schemas.SubjectStrategy, SchemaVersion: record.VersionLatest}
	ref, err := rc.SchemaRef(ev.Topic, &record.Row{EventID: ev.ID, AggregateID: ev.AggregateID, EventType: ev.EventType})
	if err != nil {
		return ""
	}
	return ref.Subject
}

// awaitSchema retries schemaValue for ev with backoff, without limit,
// while the registry does not answer (ErrTransient): like PostgreSQL
// being down, it is nobody's fault and no reason to dead-letter or skip
// the event. It returns schemaValue's last result, or ctx's error when
// the generation or Run ends first.
func (c *Consumer) awaitSchema(ctx context.Context, ev *record.Event, cause error) error {
	err := cause
	for n := 1; ; n++ {
		var re *registryError
		if !errors.As(err, &re) {
			return err
		}
		c.m.errors("registry")
		c.retries.Add(1)
		wait := c.backoff(n)
		c.eventLog(ev).Warn("schema registry unavailable, retrying the lookup", slog.String("stage", "schema"),
			slog.Int("attempt", n), slog.Uint64("schema_id", uint64(ev.SchemaID)), slog.Any("error", err), slog.Duration("backoff", wait))
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		if err = c.schemaValue(ctx, ev); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
