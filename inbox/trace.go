package inbox

import (
	"context"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/outbox-relay/record"
)

// ScopeName is the instrumentation scope of the consumer's spans.
const ScopeName = "github.com/outbox-relay/outbox-relay/inbox"

// tracing starts the consumer's spans: one per event around a Handler,
// continuing the producer's trace from the record's headers, or one per
// batch around a BatchHandler, linked to each event's producer.
type tracing struct {
	tracer trace.Tracer // nil: tracing off, the handlers run as they are
	prop   propagation.TextMapPropagator
	group  string
	// names caches the span name of each topic ("process " + topic).
	names sync.Map
}

// consumerKind is the start option of every span, made once.
var consumerKind = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer)}

// name is the span name for topic, per the messaging conventions
// ("{operation} {destination}").
func (t *tracing) name(topic string) string {
	if n, ok := t.names.Load(topic); ok {
		return n.(string)
	}
	n := "process " + topic
	t.names.Store(topic, n)
	return n
}

// WithTracerProvider makes the consumer start its spans with tp: one per
// event around Handler, continuing the producer's trace, or one per batch
// around BatchHandler, linked to each producer (docs/tracing.md). The
// default (or nil) is the global provider, which records nothing until the
// application installs an SDK; noop.NewTracerProvider() turns the spans
// off entirely.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(o *options) { o.tracerProvider = tp })
}

// WithPropagator sets how the consumer reads the producer's context from
// the record headers (traceparent, tracestate, baggage; outbox.Writer put
// them there). The default (or nil) is the global propagator
// (otel.GetTextMapPropagator), read at each event.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(o *options) { o.propagator = p })
}

// newTracing resolves the tracer provider and the propagator of o for the
// consumer group: nil is the global one (read now for the provider, which
// delegates to an SDK installed later; at each event for the propagator).
// An explicit noop provider turns tracing off entirely.
func newTracing(o options, group string) *tracing {
	tp := o.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	t := &tracing{prop: o.propagator, group: group}
	if _, off := tp.(noop.TracerProvider); !off {
		t.tracer = tp.Tracer(ScopeName)
	}
	return t
}

func (t *tracing) propagator() propagation.TextMapPropagator {
	if t.prop != nil {
		return t.prop
	}
	return otel.GetTextMapPropagator()
}

// producer returns the producer's span context carried by ev's headers
// (traceparent, tracestate; the outbox.Writer put them there) and ctx with
// it and the baggage.
func (t *tracing) producer(ctx context.Context, ev *record.Event) (context.Context, trace.SpanContext) {
	ctx = t.propagator().Extract(ctx, propagation.MapCarrier(ev.Headers))
	return ctx, trace.SpanContextFromContext(ctx)
}

// handle runs the Handler inside a consumer span that is a child of the
// producer's context, so the handler's own spans (its SQL, its HTTP calls)
// hang under the producer's trace. Without a producer context the span
// starts a trace of its own.
func (c *Consumer) handle(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
	t := c.tr
	if t.tracer == nil {
		return c.cfg.Handler(ctx, tx, ev)
	}
	ctx, _ = t.producer(ctx, ev)
	ctx, span := t.tracer.Start(ctx, t.name(ev.Topic), consumerKind...)
	if span.IsRecording() {
		span.SetAttributes(append(t.common(ev.Topic, ev.Partition),
			attribute.String("messaging.message.id", ev.ID),
			attribute.String("messaging.kafka.message.key", ev.AggregateID),
			attribute.Int64("messaging.kafka.offset", ev.Offset),
			attribute.String("outbox.event_type", ev.EventType),
			attribute.Int64("outbox.aggregate_version", ev.AggregateVersion),
		)...)
	}
	err := c.cfg.Handler(ctx, tx, ev)
	end(span, err)
	return err
}

// handleBatch runs the BatchHandler inside one consumer span for the
// batch, with a link to each event's producer context: a batch has many
// parents, so per OpenTelemetry's messaging conventions it starts a trace
// of its own and points at theirs. The links are added once the span is
// known to record, so an unsampled batch does not read the headers.
func (c *Consumer) handleBatch(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
	t := c.tr
	if t.tracer == nil {
		return c.cfg.BatchHandler(ctx, tx, evs)
	}
	first := evs[0]
	ctx, span := t.tracer.Start(ctx, t.name(first.Topic), consumerKind...)
	if span.IsRecording() {
		span.SetAttributes(append(t.common(first.Topic, first.Partition),
			attribute.Int("messaging.batch.message_count", len(evs)),
			attribute.Int64("messaging.kafka.offset", first.Offset),
		)...)
		for _, ev := range evs {
			if _, sc := t.producer(context.Background(), ev); sc.IsValid() {
				span.AddLink(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("messaging.message.id", ev.ID)}})
			}
		}
	}
	err := c.cfg.BatchHandler(ctx, tx, evs)
	end(span, err)
	return err
}

// common are the attributes every consumer span has.
func (t *tracing) common(topic string, partition int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "process"),
		attribute.String("messaging.destination.name", topic),
		attribute.String("messaging.destination.partition.id", strconv.Itoa(partition)),
		attribute.String("messaging.consumer.group.name", t.group),
	}
}

// end ends span with the handler's outcome. An error is recorded as the
// span's status and exception event; the retry, if any, is a new span.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "handler failed")
	}
	span.End()
}
