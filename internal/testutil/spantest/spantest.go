// Package spantest is a minimal recording trace.TracerProvider for the
// root module's unit tests, which cannot use the OpenTelemetry SDK (it
// stays out of the root module). The interop/tracing module checks the
// same through the real stack with the SDK's own recorder.
package spantest

import (
	"context"
	"crypto/rand"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// Provider keeps every span its tracers start. Spans of a parent that is
// not sampled are not recorded, as with the SDK's parent-based sampler.
type Provider struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*Span
}

// Tracer returns a tracer recording into p.
func (p *Provider) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracer{p: p} }

// Spans returns the spans started so far.
func (p *Provider) Spans() []*Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Span(nil), p.spans...)
}

// Only returns the one span started, failing tb otherwise.
func (p *Provider) Only(tb testing.TB) *Span {
	tb.Helper()
	s := p.Spans()
	if len(s) != 1 {
		tb.Fatalf("%d spans, want 1", len(s))
	}
	return s[0]
}

type tracer struct {
	embedded.Tracer
	p *Provider
}

func (r tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !parent.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	var sid trace.SpanID
	_, _ = rand.Read(sid[:])
	flags := trace.FlagsSampled
	if parent.IsValid() && !parent.IsSampled() {
		flags = 0
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags})
	s := &Span{Name: name, Kind: cfg.SpanKind(), SC: sc, Parent: parent, Links: cfg.Links(), Attrs: map[attribute.Key]attribute.Value{}}
	for _, a := range cfg.Attributes() {
		s.Attrs[a.Key] = a.Value
	}
	if !sc.IsSampled() {
		s.ended = true // records nothing
		return trace.ContextWithSpan(ctx, s), s
	}
	r.p.mu.Lock()
	r.p.spans = append(r.p.spans, s)
	r.p.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

// Span is a recorded span. Read its fields once it has ended.
type Span struct {
	embedded.Span
	Name   string
	Kind   trace.SpanKind
	SC     trace.SpanContext
	Parent trace.SpanContext
	Links  []trace.Link
	Attrs  map[attribute.Key]attribute.Value
	Status codes.Code
	Errors int

	mu    sync.Mutex
	ended bool
}

// Ended reports whether End was called.
func (s *Span) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// End ends the span.
func (s *Span) End(...trace.SpanEndOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
}

// AddEvent does nothing.
func (s *Span) AddEvent(string, ...trace.EventOption) {}

// AddLink records l.
func (s *Span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Links = append(s.Links, l)
}

// IsRecording is true until End.
func (s *Span) IsRecording() bool { return !s.Ended() }

// RecordError counts errors.
func (s *Span) RecordError(error, ...trace.EventOption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Errors++
}

// SpanContext returns the span's context.
func (s *Span) SpanContext() trace.SpanContext { return s.SC }

// SetStatus records the status code.
func (s *Span) SetStatus(c codes.Code, _ string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Status = c
}

// SetName renames the span.
func (s *Span) SetName(n string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Name = n
}

// TracerProvider returns nil.
func (s *Span) TracerProvider() trace.TracerProvider { return nil }

// SetAttributes records kv.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kv {
		s.Attrs[a.Key] = a.Value
	}
}
