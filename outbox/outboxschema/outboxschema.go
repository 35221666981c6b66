// Package outboxschema is the producer-side schema check (issue 48): an
// event's payload checked, before its INSERT, against the registered
// schema the relay will encode it with, so a mismatch fails the caller's
// transaction instead of reaching the dead-letter table after commit.
//
// It plugs into package outbox as an outbox.EventChecker, and lives apart
// from it, as outboxprom does, so that a producer that does not check
// links none of what the check needs (the registry client, the Avro,
// Protobuf and JSON Schema parsers, the relay's record encoders):
//
//	check, err := outboxschema.New(outboxschema.Config{
//		Record:        relayCfg.Publish.Record,        // the relay's own
//		TopicTemplate: relayCfg.Publish.TopicTemplate, // "" is the relay's default
//	})
//	w := outbox.NewWriter(table, outbox.WithEventCheck(check))
//	err = w.Append(ctx, outbox.PgxTx(tx), &event) // checked before the INSERT
//	var se *outboxschema.SchemaError
//	if errors.As(err, &se) && !se.Unavailable { /* a producer bug: se.Field, se.Subject, se.Version */ }
//
// docs/schemas.md ("Before commit: the producer-side check") has what it
// refuses, framed payloads, an unavailable registry, the cost and the
// refresh of latest.
package outboxschema

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/fielderr"
	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/internal/topictemplate"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

// Config is the part of the relay's configuration that decides which
// registered schema encodes an event: give the check the relay's own
// values, or it checks against another schema than the relay uses.
type Config struct {
	// Record is the relay's record configuration (relay.Config's
	// Publish.Record, the --record-format, --schema-subject-strategy,
	// --schema-version and --schema-registry-* flags). Format must be a
	// registry format (record.Format.Registry); SubjectStrategy,
	// SchemaVersion and Registry are read, the other fields are not.
	Record record.Config
	// TopicTemplate is the relay's topic template (--topic-template,
	// publisher.Config.TopicTemplate); "" is the relay's default,
	// publisher.DefaultTopicTemplate. The topic and topic-record subject
	// strategies name the subject by the topic.
	TopicTemplate string
}

// Checker checks events against the schemas the relay encodes them
// with, through its own registry client and cache; it is an
// outbox.EventChecker. Build one per process (or per relay configuration)
// and share it between Writers (outbox.WithEventCheck): the cache is the
// checker's. It is safe for concurrent use.
//
// A Writer built with it refuses, in Append, AppendBatch and Transition
// and before any SQL, an event the relay would dead-letter for its
// schema, with a *SchemaError (errors.Is(err, outbox.ErrInvalidEvent))
// naming the field: the mistake fails the caller's transaction, before
// commit, instead of reaching the dead-letter table after it. A registry
// that cannot be asked refuses too (errors.Is(err, ErrUnavailable)): see
// SchemaError.
//
// Cost: a schema is fetched once, parsed once, and cached by subject and
// version and by id, bounded by Registry.CacheSize entries (least
// recently used out first), so an Append of a schema already seen makes
// no request. Refresh: a numbered version and an id never change once
// registered and stay until evicted; with SchemaVersion latest, the
// subject's latest version is trusted for Registry.LatestTTL (a minute by
// default), then asked again once (concurrent Appends share the request),
// and while that refresh fails for want of a registry the version already
// known keeps being served. So for up to LatestTTL after a new version is
// registered, events are checked against the previous one, as the relay,
// with the same TTL, encodes them.
type Checker struct {
	cfg      record.Config
	template topictemplate.Template
	reg      *schemareg.Client
	// scratch holds the buffers payloads are encoded into (*[]byte), so a
	// checked Append allocates no value it throws away.
	scratch sync.Pool
}

// maxScratch is the largest buffer kept for reuse; a larger payload's is
// left to the garbage collector, so one huge event does not pin memory.
const maxScratch = 64 << 10

// New validates cfg and builds the checker's registry client. It does no
// I/O: the first Append of each schema fetches it. An invalid cfg is an
// error joining a *fielderr.Error (outbox.FieldError) per problem.
func New(cfg Config) (*Checker, error) {
	var errs []error
	if !cfg.Record.Format.Registry() {
		errs = append(errs, &fielderr.Error{Field: "Record.Format", Value: cfg.Record.Format,
			Err: errors.New("the schema check needs a registry format: avro, protobuf or json-schema")})
	} else if err := cfg.Record.Validate(); err != nil {
		errs = append(errs, &fielderr.Error{Field: "Record", Err: err})
	}
	tmpl := cfg.TopicTemplate
	if tmpl == "" {
		tmpl = publisher.DefaultTopicTemplate
	}
	t, err := topictemplate.Parse(tmpl)
	if err != nil {
		errs = append(errs, &fielderr.Error{Field: "TopicTemplate", Value: tmpl, Err: err})
	}
	reg, err := schemareg.New(cfg.Record.Registry)
	if err != nil {
		errs = append(errs, &fielderr.Error{Field: "Record.Registry", Err: err})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("outboxschema: %w", err)
	}
	return &Checker{cfg: cfg.Record, template: t, reg: reg}, nil
}

var _ outbox.EventChecker = (*Checker)(nil)

// ErrUnavailable is the class of a *SchemaError that says nothing
// about the event: the registry could not be asked (unreachable, a
// timeout, a 5xx, refused credentials, the caller's context done), and
// the event's schema was not in the cache.
var ErrUnavailable = errors.New("schema registry unavailable")

// SchemaError is an event the schema check refused. Either the relay
// would dead-letter it (its payload does not match its schema, its
// subject or version is not registered, the registered schema cannot be
// used): it unwraps to outbox.ErrInvalidEvent, like an
// *outbox.ValidationError, and retrying cannot help. Or the registry
// could not be asked (Unavailable): it unwraps to ErrUnavailable, not
// outbox.ErrInvalidEvent. Both also
// unwrap to the cause (Err: record.ErrSchemaNotFound,
// record.ErrSchemaInvalid, a context's error, ...).
//
// An unavailable registry refuses the event because the check's promise
// is "found before commit": an event let through unchecked could still
// be poison after it. A caller that would rather commit unchecked than
// fail (or retry) keeps a second Writer without outbox.WithEventCheck
// for that case; the relay checks again anyway.
type SchemaError struct {
	// EventID is the event's id as given (zero if Append would have
	// assigned one: a refused event is left unchanged).
	EventID   uuid.UUID
	EventType string
	// Topic is the topic the relay would publish to; Subject and Version
	// name the schema ("latest" or a number); SchemaID is its id, or the
	// id a framed payload carries, 0 when not known.
	Topic    string
	Subject  string
	Version  string
	SchemaID uint32
	// Field is the first offending field of a payload that does not
	// match (record.PayloadField: "items[2].price"), "" when the whole
	// payload is at fault, when the format does not name it apart from
	// Reason (a Protobuf message with a well-known type, read by
	// protojson), or for the other failures.
	Field string
	// Reason says what is wrong; it never carries the payload.
	Reason string
	// Unavailable says the registry could not be asked.
	Unavailable bool
	// Err is the cause.
	Err error
}

// Error names the event, the schema and the reason.
func (e *SchemaError) Error() string {
	class := outbox.ErrInvalidEvent
	if e.Unavailable {
		class = ErrUnavailable
	}
	id := ""
	if e.EventID != uuid.Nil {
		id = " " + e.EventID.String()
	}
	at := ""
	if e.Subject != "" {
		at = fmt.Sprintf(" subject %s version %s", e.Subject, e.Version)
	}
	if e.SchemaID != 0 {
		at += fmt.Sprintf(" (schema id %d)", e.SchemaID)
	}
	return fmt.Sprintf("%s%s (%s): schema check:%s: %s", class, id, e.EventType, at, e.Reason)
}

// Unwrap returns outbox.ErrInvalidEvent or ErrUnavailable, and Err.
func (e *SchemaError) Unwrap() []error {
	class := outbox.ErrInvalidEvent
	if e.Unavailable {
		class = ErrUnavailable
	}
	if e.Err == nil {
		return []error{class}
	}
	return []error{class, e.Err}
}

// Check reports whether the relay could encode e's payload with the
// schema it will use for e: nil, a *SchemaError, or an
// *outbox.ValidationError when the topic template renders a topic Kafka
// refuses for e. It does not run Writer.Validate; Append does both. A nil
// c checks nothing, as a Writer without a check. A payload already framed in
// the Confluent wire format (a bytea payload the application serialized,
// record.FramedSchemaID) passes when its schema id is a version of the
// event's subject, as the relay lets it through; its body is not decoded.
func (c *Checker) Check(ctx context.Context, e *outbox.Event) error {
	if c == nil {
		return nil
	}
	topic := c.template.Render(e.AggregateType, e.EventType)
	if err := record.ValidTopic(topic); err != nil {
		return &outbox.ValidationError{EventID: e.EventID, Problems: []string{"the topic template gives " + err.Error()}}
	}
	row := record.Row{
		AggregateType: e.AggregateType, AggregateID: e.AggregateID, EventType: e.EventType,
		SchemaVersion: strconv.Itoa(e.SchemaVersion), Payload: e.Payload,
	}
	fail := func(se SchemaError) error {
		se.EventID, se.EventType, se.Topic = e.EventID, e.EventType, topic
		return &se
	}
	ref, err := c.cfg.SchemaRef(topic, &row)
	if err != nil {
		var ee *record.EncodeError
		if errors.As(err, &ee) {
			return fail(SchemaError{Reason: ee.Reason, Err: err})
		}
		return fail(SchemaError{Reason: err.Error(), Err: err})
	}
	unavailable := func(id uint32, err error) error {
		return fail(SchemaError{Subject: ref.Subject, Version: ref.Version, SchemaID: id, Unavailable: true,
			Reason: fmt.Sprintf("the registry cannot be asked, and the schema is not cached: %v", err), Err: err})
	}
	id, framed := record.FramedSchemaID(e.Payload)
	if framed {
		ok, err := c.reg.Registered(ctx, ref.Subject, id)
		switch {
		case errors.Is(err, record.ErrSchemaNotFound) || err == nil && !ok:
			if err == nil {
				err = record.ErrSchemaNotFound
			}
			return fail(SchemaError{Subject: ref.Subject, Version: ref.Version, SchemaID: id, Err: err,
				Reason: fmt.Sprintf("the payload is framed with schema id %d, which is not a version of subject %s", id, ref.Subject)})
		case err != nil:
			return unavailable(id, err)
		}
	}
	s, err := c.reg.Schema(ctx, ref)
	switch {
	case errors.Is(err, record.ErrSchemaNotFound):
		return fail(SchemaError{Subject: ref.Subject, Version: ref.Version, Err: err,
			Reason: fmt.Sprintf("not registered: register it before writing events of it (%v)", err)})
	case errors.Is(err, record.ErrSchemaInvalid):
		return fail(SchemaError{Subject: ref.Subject, Version: ref.Version, Err: err,
			Reason: fmt.Sprintf("the registered schema cannot be used: %v", err)})
	case err != nil:
		return unavailable(0, err)
	}
	if framed {
		return nil // the relay passes it unchanged
	}
	// The Protobuf message is the relay's pick (EncodeRegistered): the
	// event type with the record strategies, the first message otherwise.
	message := ""
	if c.cfg.SubjectStrategy == record.SubjectRecord || c.cfg.SubjectStrategy == record.SubjectTopicRecord {
		message = e.EventType
	}
	if err := c.encode(s, e.Payload, message); err != nil {
		field, _ := record.PayloadField(err)
		return fail(SchemaError{Subject: ref.Subject, Version: ref.Version, SchemaID: s.ID, Field: field, Reason: err.Error(), Err: err})
	}
	return nil
}

// encode encodes payload with s into a reused buffer, for its error.
func (c *Checker) encode(s *record.Schema, payload []byte, message string) error {
	bp, _ := c.scratch.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	out, err := s.AppendValue((*bp)[:0], payload, message)
	if out != nil {
		*bp = out
	}
	if cap(*bp) <= maxScratch {
		c.scratch.Put(bp)
	}
	return err
}
