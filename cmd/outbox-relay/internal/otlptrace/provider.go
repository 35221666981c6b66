// Package otlptrace is the binary's span exporter: a small
// trace.TracerProvider that sends the spans it records to an OTLP/HTTP
// endpoint (protobuf encoding), with no dependency beyond the
// OpenTelemetry API and protowire.
//
// It exists so that `outbox-relay run --trace-publish --otlp-endpoint`
// works in the one binary without the OpenTelemetry SDK and its exporters
// (gRPC, generated protos) in the root module, where every library user
// of package outbox or inbox would inherit them. It covers what the relay
// uses: spans with attributes, links, events (RecordError), status,
// parent-based sampling and batched export. Applications use the SDK;
// docs/tracing.md explains the trade-off. The interop/tracing module
// decodes its requests with the official OTLP protobuf types.
package otlptrace

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config configures a Provider.
type Config struct {
	// Endpoint receives the spans: the full URL of the traces resource,
	// e.g. http://127.0.0.1:4318/v1/traces (see Endpoint).
	Endpoint string
	// Headers are sent with every export request (authentication).
	Headers map[string]string
	// Resource describes the process (service.name and the like).
	Resource []attribute.KeyValue
	// RootRatio is the share of spans without a parent that are
	// recorded (0: none, 1: all). Spans with a parent follow its sampled
	// flag, so a relay span is recorded exactly when the producer's trace
	// is.
	RootRatio float64
	// BatchSize is the most spans in one request (default 512), QueueSize
	// the most ended spans waiting for export (default 8192; more are
	// dropped and counted), Interval the longest a span waits (default
	// 1s), Timeout the bound of one request with its retries (default
	// 10s).
	BatchSize, QueueSize int
	Interval, Timeout    time.Duration
	// Logger receives export failures; nil discards them.
	Logger *slog.Logger
}

// Provider is a trace.TracerProvider that exports to OTLP/HTTP. Shutdown
// flushes it.
type Provider struct {
	embedded.TracerProvider
	cfg   Config
	exp   *exporter
	queue chan *span
	done  chan struct{}
	ended chan struct{}
	once  sync.Once
	// dropped counts spans lost to a full queue or a failed export.
	dropped atomic.Uint64
	log     *slog.Logger
}

// New starts a Provider's export loop.
func New(cfg Config) *Provider {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 512
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 8192
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Provider{cfg: cfg, queue: make(chan *span, cfg.QueueSize), done: make(chan struct{}), ended: make(chan struct{}), log: log}
	p.exp = newExporter(cfg)
	go p.loop()
	return p
}

// Dropped returns how many ended spans were never exported.
func (p *Provider) Dropped() uint64 { return p.dropped.Load() }

// Tracer returns a tracer of the instrumentation scope name.
func (p *Provider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	c := trace.NewTracerConfig(opts...)
	return &tracer{p: p, scope: &scope{name: name, version: c.InstrumentationVersion(), schemaURL: c.SchemaURL()}}
}

// Shutdown exports what is queued and stops; spans ended afterwards are
// dropped. It returns when the last request is done or ctx ends.
func (p *Provider) Shutdown(ctx context.Context) error {
	p.once.Do(func() { close(p.done) })
	select {
	case <-p.ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// loop batches ended spans and exports them.
func (p *Provider) loop() {
	defer close(p.ended)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	batch := make([]*span, 0, p.cfg.BatchSize)
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := p.exp.export(batch); err != nil {
			p.dropped.Add(uint64(len(batch)))
			p.log.Warn("exporting spans failed; they are dropped", slog.String("stage", "tracing"), slog.Int("spans", len(batch)), slog.Any("error", err))
		}
		clear(batch)
		batch = batch[:0]
	}
	for {
		select {
		case s := <-p.queue:
			batch = append(batch, s)
			if len(batch) >= p.cfg.BatchSize {
				flush()
			}
		case <-t.C:
			flush()
		case <-p.done:
			for {
				select {
				case s := <-p.queue:
					batch = append(batch, s)
					if len(batch) >= p.cfg.BatchSize {
						flush()
					}
				default:
					flush()
					return
				}
			}
		}
	}
}

// enqueue hands an ended span to the loop without ever blocking.
func (p *Provider) enqueue(s *span) {
	select {
	case <-p.done:
		p.dropped.Add(1)
		return
	default:
	}
	select {
	case p.queue <- s:
	default:
		p.dropped.Add(1)
	}
}

// scope is an instrumentation scope (one per Tracer call).
type scope struct{ name, version, schemaURL string }

type tracer struct {
	embedded.Tracer
	p     *Provider
	scope *scope
}

// Start starts a span: a child of ctx's span context (local or remote),
// sampled as that parent is, or a root sampled by RootRatio.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	c := trace.NewSpanStartConfig(opts...)
	var parent trace.SpanContext
	if !c.NewRoot() {
		parent = trace.SpanContextFromContext(ctx)
	}
	var tid trace.TraceID
	var sampled bool
	if parent.IsValid() {
		tid, sampled = parent.TraceID(), parent.IsSampled()
	} else {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
		sampled = rootSampled(tid, t.p.cfg.RootRatio)
	}
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1) // never all zero
	flags := trace.TraceFlags(0)
	if sampled {
		flags = trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: flags, TraceState: parent.TraceState()})
	if !sampled {
		s := nonRecording{sc: sc}
		return trace.ContextWithSpan(ctx, s), s
	}
	start := c.Timestamp()
	if start.IsZero() {
		start = time.Now()
	}
	s := &span{p: t.p, scope: t.scope, name: name, kind: c.SpanKind(), sc: sc, parent: parent, start: start,
		attrs: c.Attributes(), links: c.Links()}
	return trace.ContextWithSpan(ctx, s), s
}

// rootSampled decides a root span like the SDK's TraceIDRatioBased: on the
// trace ID's low 63 bits, so every process decides a trace alike.
func rootSampled(tid trace.TraceID, ratio float64) bool {
	switch {
	case ratio >= 1:
		return true
	case ratio <= 0:
		return false
	}
	return binary.BigEndian.Uint64(tid[8:16])>>1 < uint64(ratio*(1<<63))
}

// nonRecording is an unsampled span: it carries its context and records
// nothing.
type nonRecording struct {
	noop.Span
	sc trace.SpanContext
}

func (s nonRecording) SpanContext() trace.SpanContext { return s.sc }

// span is a recorded span; it is exported once ended.
type span struct {
	embedded.Span
	p      *Provider
	scope  *scope
	sc     trace.SpanContext
	parent trace.SpanContext
	kind   trace.SpanKind
	start  time.Time

	mu        sync.Mutex
	name      string
	end       time.Time
	attrs     []attribute.KeyValue
	links     []trace.Link
	events    []event
	status    codes.Code
	statusMsg string
	ended     bool
}

type event struct {
	name  string
	at    time.Time
	attrs []attribute.KeyValue
}

// Limits keep one span's memory bounded, as the SDK's defaults do.
const (
	maxAttributes = 128
	maxLinks      = 128
	maxEvents     = 128
)

func (s *span) SpanContext() trace.SpanContext { return s.sc }

func (s *span) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

func (s *span) End(opts ...trace.SpanEndOption) {
	now := time.Now()
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.end = now
	if c := trace.NewSpanEndConfig(opts...); !c.Timestamp().IsZero() {
		s.end = c.Timestamp()
	}
	s.mu.Unlock()
	s.p.enqueue(s)
}

func (s *span) AddEvent(name string, opts ...trace.EventOption) {
	c := trace.NewEventConfig(opts...)
	s.addEvent(event{name: name, at: c.Timestamp(), attrs: c.Attributes()})
}

func (s *span) addEvent(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && len(s.events) < maxEvents {
		s.events = append(s.events, e)
	}
}

func (s *span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended && len(s.links) < maxLinks {
		s.links = append(s.links, l)
	}
}

// RecordError adds the exception event of the semantic conventions.
func (s *span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	c := trace.NewEventConfig(opts...)
	attrs := append([]attribute.KeyValue{
		attribute.String("exception.type", errorType(err)),
		attribute.String("exception.message", err.Error()),
	}, c.Attributes()...)
	s.addEvent(event{name: "exception", at: c.Timestamp(), attrs: attrs})
}

func (s *span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || code == codes.Unset || s.status == codes.Ok {
		return // Unset is ignored, Ok is final
	}
	s.status = code
	s.statusMsg = ""
	if code == codes.Error {
		s.statusMsg = description
	}
}

func (s *span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.name = name
	}
}

func (s *span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	for _, a := range kv {
		replaced := false
		for i := range s.attrs {
			if s.attrs[i].Key == a.Key {
				s.attrs[i], replaced = a, true
				break
			}
		}
		if !replaced && len(s.attrs) < maxAttributes {
			s.attrs = append(s.attrs, a)
		}
	}
}

// TracerProvider returns the provider that started the span.
func (s *span) TracerProvider() trace.TracerProvider { return s.p }
