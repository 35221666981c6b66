package relay

import (
	"bytes"
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// ScopeName is the instrumentation scope of the relay's spans.
const ScopeName = "github.com/outbox-relay/outbox-relay/relay"

// WithTracerProvider makes the relay emit one short producer span per
// event, named "publish <topic>", from the moment the event is handed to
// the publisher to the moment it is taken care of (acknowledged by Kafka,
// or dead-lettered or parked). The span is a child of the producer's
// context, read from the row's traceparent header (outbox.Writer puts it
// there), so it shows in the producer's trace; tp's sampler decides, per
// event, whether it is recorded. The records are not changed: consumers
// continue the producer's trace, not the relay's span.
//
// Off by default (no spans, no cost); a noop provider is off too.
// docs/tracing.md has the cost on the drain.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracerProvider = tp })
}

// WithPropagator sets how the relay reads the producer's context from a
// row's headers for its publish spans; the default is W3C trace context
// (propagation.TraceContext), what outbox.Writer writes with the usual
// global propagator.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(o *options) { o.propagator = p })
}

// publishSpans starts the publish spans of one stream.
type publishSpans struct {
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	fields   [][]byte // the header names prop reads, as JSON strings
	template publisher.TopicTemplate
}

// producerKind is the start option of every publish span, made once.
var producerKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}

// publishSpans returns the stream's span starter, nil when tracing is off.
func (r *Relay) publishSpans() *publishSpans {
	tp := r.opts.tracerProvider
	if tp == nil {
		return nil
	}
	if _, off := tp.(noop.TracerProvider); off {
		return nil
	}
	p := &publishSpans{tracer: tp.Tracer(ScopeName), prop: r.opts.propagator, template: r.c.template}
	if p.prop == nil {
		p.prop = propagation.TraceContext{}
	}
	for _, f := range p.prop.Fields() {
		q, _ := json.Marshal(f)
		p.fields = append(p.fields, q)
	}
	return p
}

// start begins ev's publish span and returns the Acker that ends it when
// the publisher acknowledges ev, then acknowledges through ack. An event
// the sampler drops gets ack itself back: no span, no wrapper, and no
// topic rendered.
func (p *publishSpans) start(ev *replication.WALEvent, ack publisher.Acker) publisher.Acker {
	_, span := p.tracer.Start(p.producer(ev), "publish", producerKind...)
	if !span.IsRecording() {
		span.End()
		return ack
	}
	topic := p.template.Render(ev.AggregateType, ev.EventType)
	span.SetName("publish " + topic)
	span.SetAttributes(
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.message.id", ev.EventID),
		attribute.String("messaging.kafka.message.key", ev.AggregateID),
		attribute.String("outbox.event_type", ev.EventType),
	)
	return &spanAck{ack: ack, span: span}
}

// producer returns a context carrying the producer's span context from
// ev's headers (raw JSON), or Background. Headers that cannot hold one of
// the propagator's fields are not looked into.
func (p *publishSpans) producer(ev *replication.WALEvent) context.Context {
	ctx := context.Background()
	h := ev.Headers
	if len(h) == 0 {
		return ctx
	}
	found := false
	for _, f := range p.fields {
		if bytes.Contains(h, f) {
			found = true
			break
		}
	}
	if !found {
		return ctx
	}
	return p.prop.Extract(ctx, &jsonCarrier{raw: h})
}

// jsonCarrier reads propagation fields from a row's raw headers, a flat
// JSON object of strings, without decoding the whole object: Get scans
// for the key. An object it cannot scan (escapes, other value types) is
// decoded once with encoding/json instead; one that does not decode
// carries nothing (the publisher dead-letters such an event).
type jsonCarrier struct {
	raw     []byte
	decoded map[string]string
	slow    bool
}

func (c *jsonCarrier) Get(key string) string {
	if !c.slow {
		if v, ok := scanHeader(c.raw, key); ok {
			return v
		}
		c.decode()
	}
	return c.decoded[key]
}

// decode is the slow path: the whole object, or nothing if it is not an
// object of strings.
func (c *jsonCarrier) decode() {
	c.slow = true
	if json.Unmarshal(c.raw, &c.decoded) != nil {
		c.decoded = nil
	}
}

// Set does nothing: the relay only extracts.
func (c *jsonCarrier) Set(string, string) {}

func (c *jsonCarrier) Keys() []string {
	if !c.slow {
		c.decode()
	}
	keys := make([]string, 0, len(c.decoded))
	for k := range c.decoded {
		keys = append(keys, k)
	}
	return keys
}

// scanHeader returns key's value in raw, a JSON object of plain strings
// (the last one, as encoding/json, should the key repeat). ok is false
// when raw is anything else (an escape, another value type, malformed):
// the caller then decodes it properly. A key that is absent is ("", true).
func scanHeader(raw []byte, key string) (string, bool) {
	s := jsontext.NewScanner(raw)
	s.SkipSpace()
	if !s.Consume('{') {
		return "", false
	}
	s.SkipSpace()
	if s.Consume('}') {
		s.SkipSpace()
		return "", s.AtEnd()
	}
	var val []byte
	for {
		k, ok := plainString(s)
		if !ok {
			return "", false
		}
		s.SkipSpace()
		if !s.Consume(':') {
			return "", false
		}
		s.SkipSpace()
		v, ok := plainString(s)
		if !ok {
			return "", false
		}
		if string(k) == key {
			val = v
		}
		s.SkipSpace()
		switch {
		case s.Consume(','):
			s.SkipSpace()
		case s.Consume('}'):
			s.SkipSpace()
			if !s.AtEnd() {
				return "", false
			}
			return string(val), true
		default:
			return "", false
		}
	}
}

// plainString reads the string token that comes next if its text is its
// value (no escapes, printable ASCII) and returns that text.
func plainString(s *jsontext.Scanner) ([]byte, bool) {
	tok, plain, err := s.StringToken()
	if err != nil || !plain {
		return nil, false
	}
	return tok[1 : len(tok)-1], true
}

// spanAck ends the publish span at the acknowledgement.
type spanAck struct {
	ack  publisher.Acker
	span trace.Span
}

func (a *spanAck) Ack(n int) {
	a.span.End()
	a.ack.Ack(n)
}

// failSpan ends the publish span of an event the publisher refused with
// err (the stream stops on such errors), if it has one.
func failSpan(ack publisher.Acker, err error) {
	if a, ok := ack.(*spanAck); ok {
		a.span.RecordError(err)
		a.span.SetStatus(codes.Error, "publish failed")
		a.span.End()
	}
}
