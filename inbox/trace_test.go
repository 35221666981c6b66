package inbox

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/outbox-relay/internal/testutil/spantest"
	"github.com/outbox-relay/outbox-relay/record"
)

// The real SDK's recorder checks the same through the whole stack in the
// interop/tracing module; here spantest's minimal provider is enough.

var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

const (
	producerTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	producerTrace       = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan        = "00f067aa0ba902b7"
)

func tracedEvent(id string, traced bool) *record.Event {
	ev := &record.Event{ID: id, AggregateType: "order", AggregateID: "o-1", AggregateVersion: 3, EventType: "order.paid", Topic: "orders", Partition: 2, Offset: 41}
	if traced {
		ev.Headers = map[string]string{"traceparent": producerTraceparent, "baggage": "tenant=t-7", "other": "x"}
	}
	return ev
}

// tracedConsumer is a consumer of group "billing" built by New with tp
// and the W3C propagators (trace context and baggage).
func tracedConsumer(tp trace.TracerProvider, h Handler, bh BatchHandler) *Consumer {
	cfg := validConfig()
	cfg.GroupID, cfg.Handler, cfg.BatchHandler = "billing", h, bh
	c, err := New(cfg, WithTracerProvider(tp), WithPropagator(w3c))
	if err != nil {
		panic(err)
	}
	return c
}

func TestHandlerSpanContinuesProducerTrace(t *testing.T) {
	tp := &spantest.Provider{}
	var inHandler trace.SpanContext
	var tenant string
	c := tracedConsumer(tp, func(ctx context.Context, _ pgx.Tx, _ *record.Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		tenant = baggage.FromContext(ctx).Member("tenant").Value()
		return nil
	}, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); err != nil {
		t.Fatal(err)
	}
	s := tp.Only(t)
	if s.Name != "process orders" || s.Kind != trace.SpanKindConsumer || !s.Ended() {
		t.Fatalf("span %q kind %v ended %v, want an ended consumer span \"process orders\"", s.Name, s.Kind, s.Ended())
	}
	if s.Parent.TraceID().String() != producerTrace || s.Parent.SpanID().String() != producerSpan || !s.Parent.IsRemote() {
		t.Fatalf("parent = %v, want the producer's remote span %s/%s", s.Parent, producerTrace, producerSpan)
	}
	if !inHandler.Equal(s.SC) {
		t.Fatalf("the handler's ctx carries %v, want the consumer span %v", inHandler, s.SC)
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
		if got := s.Attrs[k]; got != want {
			t.Errorf("attribute %s = %v, want %v", k, got.String(), want.String())
		}
	}
}

func TestHandlerSpanWithoutProducerContext(t *testing.T) {
	tp := &spantest.Provider{}
	c := tracedConsumer(tp, func(context.Context, pgx.Tx, *record.Event) error { return nil }, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", false)); err != nil {
		t.Fatal(err)
	}
	if s := tp.Only(t); s.Parent.IsValid() || !s.SC.IsValid() {
		t.Fatalf("parent %v, span %v: want a root span", s.Parent, s.SC)
	}
}

func TestHandlerSpanRecordsError(t *testing.T) {
	tp := &spantest.Provider{}
	boom := errors.New("boom")
	c := tracedConsumer(tp, func(context.Context, pgx.Tx, *record.Event) error { return boom }, nil)
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the handler's", err)
	}
	if s := tp.Only(t); s.Status != codes.Error || !s.Ended() || s.Errors != 1 {
		t.Fatalf("status %v ended %v errors %d: want an ended span with error status", s.Status, s.Ended(), s.Errors)
	}
}

func TestBatchSpanLinksProducers(t *testing.T) {
	tp := &spantest.Provider{}
	var inHandler trace.SpanContext
	c := tracedConsumer(tp, nil, func(ctx context.Context, _ pgx.Tx, _ []*record.Event) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	})
	evs := []*record.Event{tracedEvent("e-1", true), tracedEvent("e-2", false), tracedEvent("e-3", true)}
	if err := c.handleBatch(context.Background(), nil, evs); err != nil {
		t.Fatal(err)
	}
	s := tp.Only(t)
	if s.Parent.IsValid() {
		t.Fatalf("batch span has parent %v, want a root span", s.Parent)
	}
	if !inHandler.Equal(s.SC) {
		t.Fatalf("the handler's ctx carries %v, want the batch span %v", inHandler, s.SC)
	}
	if len(s.Links) != 2 {
		t.Fatalf("%d links, want 2 (the events with a producer context)", len(s.Links))
	}
	for i, l := range s.Links {
		if l.SpanContext.TraceID().String() != producerTrace || l.SpanContext.SpanID().String() != producerSpan {
			t.Errorf("link %d = %v, want the producer's span", i, l.SpanContext)
		}
	}
	if got := s.Attrs["messaging.batch.message_count"]; got != attribute.IntValue(3) {
		t.Errorf("messaging.batch.message_count = %v, want 3", got.String())
	}
}

func TestNoopProviderSkipsSpans(t *testing.T) {
	var hadSpan bool
	c := tracedConsumer(noop.NewTracerProvider(), func(ctx context.Context, _ pgx.Tx, _ *record.Event) error {
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

// TestWithPropagator: the propagator of WithPropagator is the one that
// reads the producer's context. The global one, the default, is empty
// until the application installs one, so without the option the span has
// no parent; a propagator that reads another header finds nothing either.
func TestWithPropagator(t *testing.T) {
	h := func(context.Context, pgx.Tx, *record.Event) error { return nil }
	for name, tc := range map[string]struct {
		opts   []Option
		parent bool
	}{
		"default (global, empty)": {nil, false},
		"W3C trace context":       {[]Option{WithPropagator(propagation.TraceContext{})}, true},
		"baggage only":            {[]Option{WithPropagator(propagation.Baggage{})}, false},
	} {
		t.Run(name, func(t *testing.T) {
			tp := &spantest.Provider{}
			cfg := validConfig()
			cfg.Handler = h
			c, err := New(cfg, append(tc.opts, WithTracerProvider(tp))...)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.handle(context.Background(), nil, tracedEvent("e-1", true)); err != nil {
				t.Fatal(err)
			}
			if s := tp.Only(t); s.Parent.IsValid() != tc.parent {
				t.Fatalf("span parent %v, want a parent: %v", s.Parent, tc.parent)
			}
		})
	}
}

// TestWithTracerProvider: without the option the consumer traces with the
// global provider (a delegate, so an SDK installed later is used); with
// it, its spans go to the given provider.
func TestWithTracerProvider(t *testing.T) {
	cfg := validConfig()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.tr.tracer == nil {
		t.Fatal("default: tracing off, want the global provider's tracer")
	}
	tp := &spantest.Provider{}
	var got trace.SpanContext
	cfg.Handler = func(ctx context.Context, _ pgx.Tx, _ *record.Event) error {
		got = trace.SpanContextFromContext(ctx)
		return nil
	}
	if c, err = New(cfg, WithTracerProvider(tp)); err != nil {
		t.Fatal(err)
	}
	if err := c.handle(context.Background(), nil, tracedEvent("e-1", false)); err != nil {
		t.Fatal(err)
	}
	if s := tp.Only(t); !got.Equal(s.SC) {
		t.Fatalf("the handler ran in %v, want the provider's span %v", got, s.SC)
	}
}

// BenchmarkHandle is the per-event cost of the span around a Handler:
// direct is the handler alone, default what an application without an
// OpenTelemetry SDK pays (the global provider and propagator), noop an
// explicit noop provider, recording a recording span of a provider that
// keeps nothing.
func BenchmarkHandle(b *testing.B) {
	h := func(context.Context, pgx.Tx, *record.Event) error { return nil }
	ev := tracedEvent("0190a0b0-0000-7000-8000-000000000001", true)
	for _, bc := range []struct {
		name string
		c    *Consumer
	}{
		{"direct", nil},
		{"default", &Consumer{cfg: Config{Handler: h}, tr: newTracing(options{}, "")}},
		{"noop", &Consumer{cfg: Config{Handler: h}, tr: newTracing(options{tracerProvider: noop.NewTracerProvider()}, "")}},
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
