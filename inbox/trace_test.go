package inbox

import (
	"context"
	"crypto/rand"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// The real SDK's recorder checks the same through the whole stack in the
// interop/tracing module; here a minimal recording provider is enough.

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

const (
	producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	producerTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan        = "00f067aa0ba902b7"
)

func tracedEvent(id string, traced bool) *Event {
	ev := &Event{ID: id, AggregateType: "order", AggregateID: "o-1", AggregateVersion: 3, EventType: "order.paid", Topic: "orders", Partition: 2, Offset: 41}
	if traced {
		ev.Headers = map[string]string{"traceparent": producerTraceparent, "baggage": "tenant=t-7", "other": "x"}
	}
	return ev
}

func tracedConsumer(tp trace.TracerProvider, h Handler, bh BatchHandler) *Consumer {
	cfg := Config{GroupID: "billing", Handler: h, BatchHandler: bh, TracerProvider: tp, Propagator: w3c}
	return &Consumer{cfg: cfg, tr: newTracing(cfg)}
}

func TestHandlerSpanContinuesProducerTrace(t *testing.T) {
	tp := &recordingProvider{}
	var inHandler trace.SpanContext
	var tenant string
	c := tracedConsumer(tp, func(ctx context.Context, _ pgx.Tx, _ *Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		tenant = baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); err != nil {
		t.Fatal(err)
	}
	s := tp.only(t)
	if s.name != "process orders" || s.kind != trace.SpanKindConsumer || !s.ended {
		t.Fatalf("span %q kind %v ended %v, want an ended consumer span \"process orders\"", s.name, s.kind, s.ended)
	}
	if s.parent.TraceID().String() != producerTrace || s.parent.SpanID().String() != producerSpan || !s.parent.IsRemote() {
		t.Fatalf("parent = %v, want the producer's remote span %s/%s", s.parent, producerTrace, producerSpan)
	}
	if !inHandler.Equal(s.sc) {
		t.Fatalf("the handler's ctx carries %v, want the consumer span %v", inHandler, s.sc)
	}
	if tenant != "t-7" {
		t.Fatalf("baggage tenant = %q in the handler, want t-7", tenant)
	}
	for k, want := range map[attribute.Key]attribute.Value{
		"messaging.system": attribute.StringValue("kafka"), "messaging.destination.name": attribute.StringValue("orders"),
		"messaging.destination.partition.id": attribute.StringValue("2"), "messaging.kafka.offset": attribute.Int64Value(41),
		"messaging.message.id": attribute.StringValue("e-1"), "messaging.consumer.group.name": attribute.StringValue("billing"),
		"outbox.event_type": attribute.StringValue("order.paid"),
	} {
		if got := s.attrs[k]; got != want {
			t.Errorf("attribute %s = %v, want %v", k, got.Emit(), want.Emit())
		}
	}
}

func TestHandlerSpanWithoutProducerContext(t *testing.T) {
	tp := &recordingProvider{}
	c := tracedConsumer(tp, func(context.Context, pgx.Tx, *Event) error { return nil }, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", false)); err != nil {
		t.Fatal(err)
	}
	if s := tp.only(t); s.parent.IsValid() || !s.sc.IsValid() {
		t.Fatalf("parent %v, span %v: want a root span", s.parent, s.sc)
	}
}

func TestHandlerSpanRecordsError(t *testing.T) {
	tp := &recordingProvider{}
	boom := errors.New("boom")
	c := tracedConsumer(tp, func(context.Context, pgx.Tx, *Event) error { return boom }, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the handler's", err)
	}
	if s := tp.only(t); s.status != codes.Error || !s.ended || s.errs != 1 {
		t.Fatalf("status %v ended %v errors %d: want an ended span with error status", s.status, s.ended, s.errs)
	}
}

func TestBatchSpanLinksProducers(t *testing.T) {
	tp := &recordingProvider{}
	var inHandler trace.SpanContext
	c := tracedConsumer(tp, nil, func(ctx context.Context, _ pgx.Tx, _ []*Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	})
	evs := []*Event{tracedEvent("e-1", true), tracedEvent("e-2", false), tracedEvent("e-3", true)}
	if err := c.handleBatch(context.Background(), nil, evs); err != nil {
		t.Fatal(err)
	}
	s := tp.only(t)
	if s.parent.IsValid() {
		t.Fatalf("batch span has parent %v, want a root span", s.parent)
	}
	if !inHandler.Equal(s.sc) {
		t.Fatalf("the handler's ctx carries %v, want the batch span %v", inHandler, s.sc)
	}
	if len(s.links) != 2 {
		t.Fatalf("%d links, want 2 (the events with a producer context)", len(s.links))
	}
	for i, l := range s.links {
		if l.SpanContext.TraceID().String() != producerTrace || l.SpanContext.SpanID().String() != producerSpan {
			t.Errorf("link %d = %v, want the producer's span", i, l.SpanContext)
		}
	}
	if got := s.attrs["messaging.batch.message_count"]; got != attribute.IntValue(3) {
		t.Errorf("messaging.batch.message_count = %v, want 3", got.Emit())
	}
}

func TestNoopProviderSkipsSpans(t *testing.T) {
	var hadSpan bool
	c := tracedConsumer(noop.NewTracerProvider(), func(ctx context.Context, _ pgx.Tx, _ *Event) error {
		hadSpan = trace.SpanContextFromContext(ctx).IsValid()
		return nil
	}, nil)
	if c.tr.tracer != nil {
		t.Fatal("a noop provider should turn tracing off")
	}
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); err != nil || hadSpan {
		t.Fatalf("err %v, span in handler %v", err, hadSpan)
	}
}

// BenchmarkHandle is the per-event cost of the span around a Handler:
// direct is the handler alone, default what an application without an
// OpenTelemetry SDK pays (the global provider and propagator), noop an
// explicit noop provider, recording a recording span of a provider that
// keeps nothing.
func BenchmarkHandle(b *testing.B) {
	h := func(context.Context, pgx.Tx, *Event) error { return nil }
	ev := tracedEvent("0190a0b0-0000-7000-8000-000000000001", true)
	for _, bc := range []struct {
		name string
		c    *Consumer
	}{
		{"direct", nil},
		{"default", &Consumer{cfg: Config{Handler: h}, tr: newTracing(Config{})}},
		{"noop", &Consumer{cfg: Config{Handler: h}, tr: newTracing(Config{TracerProvider: noop.NewTracerProvider()})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if bc.c == nil {
					err = h(ctx, nil, ev)
				} else {
					err = bc.c.handle(ctx, nil, ev)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// recordingProvider is a minimal TracerProvider that keeps every span.
type recordingProvider struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*recordedSpan
}

func (p *recordingProvider) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{p: p}
}

func (p *recordingProvider) only(t *testing.T) *recordedSpan {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.spans) != 1 {
		t.Fatalf("%d spans, want 1", len(p.spans))
	}
	return p.spans[0]
}

type recordingTracer struct {
	embedded.Tracer
	p *recordingProvider
}

func (r recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !parent.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	var sid trace.SpanID
	_, _ = rand.Read(sid[:])
	s := &recordedSpan{name: name, kind: cfg.SpanKind(), parent: parent, links: cfg.Links(), attrs: map[attribute.Key]attribute.Value{},
		sc: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})}
	r.p.mu.Lock()
	r.p.spans = append(r.p.spans, s)
	r.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recordedSpan struct {
	embedded.Span
	name   string
	kind   trace.SpanKind
	sc     trace.SpanContext
	parent trace.SpanContext
	links  []trace.Link
	attrs  map[attribute.Key]attribute.Value
	status codes.Code
	errs   int
	ended  bool
}

func (s *recordedSpan) End(...trace.SpanEndOption)              { s.ended = true }
func (s *recordedSpan) AddEvent(string, ...trace.EventOption)   {}
func (s *recordedSpan) AddLink(l trace.Link)                    { s.links = append(s.links, l) }
func (s *recordedSpan) IsRecording() bool                       { return !s.ended }
func (s *recordedSpan) RecordError(error, ...trace.EventOption) { s.errs++ }
func (s *recordedSpan) SpanContext() trace.SpanContext          { return s.sc }
func (s *recordedSpan) SetStatus(c codes.Code, _ string)        { s.status = c }
func (s *recordedSpan) SetName(n string)                        { s.name = n }
func (s *recordedSpan) TracerProvider() trace.TracerProvider    { return nil }
func (s *recordedSpan) SetAttributes(kv ...attribute.KeyValue) {
	for _, a := range kv {
		s.attrs[a.Key] = a.Value
	}
}
