package otlptrace

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// The interop/tracing module decodes these requests with the official
// OTLP types; here a generic protowire walk is enough.

// receiver is an OTLP/HTTP endpoint that keeps the span names it got.
type receiver struct {
	mu      sync.Mutex
	names   []string
	headers []http.Header
	fail    int // answer 503 to this many requests first
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.headers = append(r.headers, req.Header.Clone())
	if r.fail > 0 {
		r.fail--
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	// ExportTraceServiceRequest(1) > ResourceSpans(2: scope_spans) > ScopeSpans(2: spans) > Span(5: name)
	for _, rs := range fields(body, 1) {
		for _, ss := range fields(rs, 2) {
			for _, sp := range fields(ss, 2) {
				for _, n := range fields(sp, 5) {
					r.names = append(r.names, string(n))
				}
			}
		}
	}
}

func (r *receiver) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

// fields returns the bytes-typed values of field num in a message.
func fields(b []byte, num protowire.Number) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil
		}
		b = b[l:]
		if typ == protowire.BytesType && n == num {
			v, l := protowire.ConsumeBytes(b)
			if l < 0 {
				return nil
			}
			out = append(out, v)
			b = b[l:]
			continue
		}
		l = protowire.ConsumeFieldValue(n, typ, b)
		if l < 0 {
			return nil
		}
		b = b[l:]
	}
	return out
}

func sampledParent() context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

func TestExportOnShutdown(t *testing.T) {
	rcv := &receiver{fail: 1}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	p := New(Config{Endpoint: srv.URL + "/v1/traces", Headers: map[string]string{"Authorization": "Bearer x"}, Interval: time.Hour})
	tr := p.Tracer("test")
	for _, name := range []string{"a", "b"} {
		_, s := tr.Start(sampledParent(), name)
		s.End()
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := rcv.got(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("received spans %v, want [a b] (after one 503, retried)", got)
	}
	h := rcv.headers[len(rcv.headers)-1]
	if h.Get("Content-Type") != "application/x-protobuf" || h.Get("Authorization") != "Bearer x" {
		t.Fatalf("request headers %v", h)
	}
	_, s := tr.Start(sampledParent(), "late")
	s.End()
	if p.Dropped() != 1 {
		t.Fatalf("Dropped = %d, want 1 (a span ended after Shutdown)", p.Dropped())
	}
}

func TestExportBatches(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	p := New(Config{Endpoint: srv.URL, BatchSize: 3, Interval: 10 * time.Millisecond})
	defer func() { _ = p.Shutdown(context.Background()) }()
	tr := p.Tracer("test")
	for range 7 {
		_, s := tr.Start(sampledParent(), "s")
		s.End()
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(rcv.got()) < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("received %d spans, want 7 without Shutdown", len(rcv.got()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExportFailureDrops(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadRequest) }))
	defer srv.Close()
	p := New(Config{Endpoint: srv.URL})
	_, s := p.Tracer("test").Start(sampledParent(), "s")
	s.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Dropped() != 1 {
		t.Fatalf("Dropped = %d, want 1 (400 is not retried)", p.Dropped())
	}
}

func TestSampling(t *testing.T) {
	p := New(Config{Endpoint: "http://127.0.0.1:1/v1/traces"})
	defer func() { _ = p.Shutdown(context.Background()) }()
	tr := p.Tracer("test")

	ctx, s := tr.Start(sampledParent(), "child")
	if !s.IsRecording() || s.SpanContext().TraceID() != (trace.TraceID{1}) || !s.SpanContext().IsSampled() {
		t.Fatalf("child of a sampled parent: recording %v, context %v", s.IsRecording(), s.SpanContext())
	}
	if got := trace.SpanFromContext(ctx); got != s {
		t.Fatal("the returned context does not carry the span")
	}
	if sp := s.(*span); sp.parent.SpanID() != (trace.SpanID{2}) || !sp.parent.IsRemote() {
		t.Fatalf("parent = %v", sp.parent)
	}

	unsampled := trace.ContextWithRemoteSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true}))
	if _, s := tr.Start(unsampled, "child"); s.IsRecording() || !s.SpanContext().IsValid() || s.SpanContext().TraceID() != (trace.TraceID{1}) {
		t.Fatalf("child of an unsampled parent: recording %v, context %v", s.IsRecording(), s.SpanContext())
	}
	if _, s := tr.Start(context.Background(), "root"); s.IsRecording() {
		t.Fatal("a root span is recorded with RootRatio 0")
	}
	if _, s := tr.Start(sampledParent(), "root", trace.WithNewRoot()); s.IsRecording() {
		t.Fatal("WithNewRoot ignored the parent... and recorded a root with RootRatio 0")
	}
	all := New(Config{Endpoint: "http://127.0.0.1:1/v1/traces", RootRatio: 1})
	defer func() { _ = all.Shutdown(context.Background()) }()
	if _, s := all.Tracer("t").Start(context.Background(), "root"); !s.IsRecording() {
		t.Fatal("a root span is not recorded with RootRatio 1")
	}
	half := 0
	for i := range 10000 {
		tid := trace.TraceID{}
		v := uint16(i * 65536 / 10000)
		tid[8], tid[9] = byte(v>>8), byte(v)
		if rootSampled(tid, 0.5) {
			half++
		}
	}
	if half != 5000 {
		t.Fatalf("ratio 0.5 sampled %d of 10000 evenly spread trace ids", half)
	}
}

func TestSpanRecording(t *testing.T) {
	p := New(Config{Endpoint: "http://127.0.0.1:1/v1/traces", Timeout: 100 * time.Millisecond})
	defer func() { _ = p.Shutdown(context.Background()) }()
	_, s := p.Tracer("test").Start(sampledParent(), "s", trace.WithAttributes(attribute.String("a", "1")))
	s.SetAttributes(attribute.String("a", "2"), attribute.Int("b", 3))
	s.RecordError(errors.New("boom"))
	s.SetStatus(codes.Error, "failed")
	s.SetStatus(codes.Unset, "")
	s.SetName("renamed")
	s.End()
	s.SetStatus(codes.Ok, "")
	sp := s.(*span)
	if sp.name != "renamed" || sp.status != codes.Error || sp.statusMsg != "failed" || len(sp.events) != 1 || len(sp.attrs) != 2 || sp.attrs[0].Value.AsString() != "2" {
		t.Fatalf("span %+v", sp)
	}
	if sp.events[0].name != "exception" || sp.events[0].attrs[1].Value.AsString() != "boom" {
		t.Fatalf("event %+v", sp.events[0])
	}
}

func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4318":           "http://127.0.0.1:4318/v1/traces",
		"http://127.0.0.1:4318/":          "http://127.0.0.1:4318/v1/traces",
		"https://otel.example:443/custom": "https://otel.example:443/custom",
	} {
		if got, err := Endpoint(in); err != nil || got != want {
			t.Errorf("Endpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"127.0.0.1:4318", "grpc://x:4317", "http://", "::"} {
		if _, err := Endpoint(bad); err == nil {
			t.Errorf("Endpoint(%q) accepted", bad)
		}
	}
}

func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders("api-key=a%20b, x=1,")
	if err != nil || len(h) != 2 || h["api-key"] != "a b" || h["x"] != "1" {
		t.Fatalf("ParseHeaders = %v, %v", h, err)
	}
	if _, err := ParseHeaders("novalue"); err == nil {
		t.Fatal("a pair without = accepted")
	}
}

func TestAppendMessageLongBody(t *testing.T) {
	long := make([]byte, 300) // a length that needs two varint bytes
	b := appendMessage(nil, 1, func(b []byte) []byte { return appendBytes(b, 2, long) })
	inner := fields(b, 1)
	if len(inner) != 1 || len(fields(inner[0], 2)) != 1 || len(fields(inner[0], 2)[0]) != 300 {
		t.Fatalf("nested message of a 300-byte field does not decode")
	}
}

// BenchmarkEncode is the exporter's encoding cost per span (a publish
// span: 7 attributes, a remote parent).
func BenchmarkEncode(b *testing.B) {
	p := New(Config{Endpoint: "http://127.0.0.1:1/v1/traces"})
	defer func() { _ = p.Shutdown(context.Background()) }()
	tr := p.Tracer("bench")
	spans := make([]*span, 512)
	for i := range spans {
		_, s := tr.Start(sampledParent(), "publish outbox.event.order")
		s.SetAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "publish"), attribute.String("messaging.destination.name", "outbox.event.order"),
			attribute.String("messaging.message.id", "0190a0b0-0000-7000-8000-000000000001"), attribute.String("messaging.kafka.message.key", "o-1"),
			attribute.String("outbox.event_type", "order.confirmed"))
		spans[i] = s.(*span)
		spans[i].ended = true
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRequest(buf[:0], []attribute.KeyValue{attribute.String("service.name", "outbox-relay")}, spans)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(spans)), "ns/span")
	b.ReportMetric(float64(len(buf))/float64(len(spans)), "bytes/span")
}

// BenchmarkPublishSpanExport is the exporter's side of the relay's publish
// span on the drain path: a span of a sampled (or unsampled) remote parent
// started with the relay's 7 attributes, ended, and, when sampled, encoded
// and posted to a local OTLP/HTTP receiver that discards it. The relay's
// own side (reading the producer's context, the hand-off and the
// acknowledgement) is BenchmarkPublishSpan in package relay; docs/tracing.md
// adds the two. cpu-ns/op is the process's CPU time per span (both cores:
// the export runs beside the caller).
func BenchmarkPublishSpanExport(b *testing.B) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(r.ContentLength)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	unsampled := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, Remote: true}))
	for _, bc := range []struct {
		name   string
		parent context.Context
	}{{"sampled", sampledParent()}, {"unsampled", unsampled}} {
		b.Run(bc.name, func(b *testing.B) {
			p := New(Config{Endpoint: srv.URL + "/v1/traces", QueueSize: 1 << 16})
			tr := p.Tracer("bench")
			attrs := []attribute.KeyValue{attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.operation.name", "publish"), attribute.String("messaging.destination.name", "outbox.event.order"),
				attribute.String("messaging.message.id", "0190a0b0-0000-7000-8000-000000000001"), attribute.String("messaging.kafka.message.key", "o-1"),
				attribute.String("outbox.event_type", "order.confirmed")}
			cpu0 := cpuTime()
			b.ReportAllocs()
			for b.Loop() {
				_, s := tr.Start(bc.parent, "publish outbox.event.order", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
				s.End()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := p.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64(p.Dropped())/float64(b.N), "dropped/op")
		})
	}
}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
