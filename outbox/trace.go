package outbox

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// WithPropagator makes Append and AppendBatch write the trace context of
// their ctx through p instead of the global propagator
// (otel.GetTextMapPropagator), the default (and what a nil p gives). An
// empty composite, propagation.NewCompositeTextMapPropagator(), turns the
// copy off. A Writer option.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optionFunc(func(o *options) { o.propagator = p })
}

// traceHeaders returns the headers that carry ctx's trace context
// (traceparent, tracestate, baggage with the W3C propagators), or nil.
//
// It is free when there is nothing to carry: a ctx without a valid span
// context and without baggage returns before any propagator is asked, so
// an application without OpenTelemetry pays one context lookup per call
// and gets no headers. A table without a headers column gets none either.
// Otherwise the configured propagator, or the global one read at each
// call (so one installed after NewWriter applies), writes them; the
// global default propagates nothing until the application installs one
// with otel.SetTextMapPropagator.
func (w *Writer) traceHeaders(ctx context.Context) map[string]string {
	if !w.headers || ctx == nil {
		return nil
	}
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return nil
	}
	p := w.prop
	if p == nil {
		p = otel.GetTextMapPropagator()
	}
	var c lazyCarrier
	p.Inject(ctx, &c)
	return c.m
}

// withTrace returns h with the trace headers th added; a header the event
// sets itself wins over the propagated one. h is not modified.
func withTrace(h, th map[string]string) map[string]string {
	if len(th) == 0 {
		return h
	}
	if len(h) == 0 {
		return th
	}
	out := make(map[string]string, len(h)+len(th))
	for k, v := range th {
		out[k] = v
	}
	for k, v := range h {
		out[k] = v
	}
	return out
}

// lazyCarrier is a propagation.TextMapCarrier whose map is made on the
// first Set, so a propagator that writes nothing allocates nothing.
type lazyCarrier struct{ m map[string]string }

func (c *lazyCarrier) Get(key string) string { return c.m[key] }

func (c *lazyCarrier) Set(key, value string) {
	if c.m == nil {
		c.m = make(map[string]string, 3)
	}
	c.m[key] = value
}

func (c *lazyCarrier) Keys() []string {
	keys := make([]string, 0, len(c.m))
	for k := range c.m {
		keys = append(keys, k)
	}
	return keys
}
