package otlptrace

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
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

// pipeServer serves h over in-memory connections (net.Pipe), for tests in
// a synctest bubble: a real socket would not block durably, so the fake
// clock could not run the exporter's backoff and interval.
type pipeServer struct {
	srv   *http.Server
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// servePipes serves h until the returned server's close; p's exporter
// reaches it over pipes, whatever host its endpoint names.
func servePipes(p *Provider, h http.Handler) *pipeServer {
	s := &pipeServer{srv: &http.Server{Handler: h}, conns: make(chan net.Conn), done: make(chan struct{})}
	go func() { _ = s.srv.Serve(s) }()
	p.exp.client.Transport = &http.Transport{DialContext: s.dial}
	return s
}

func (s *pipeServer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case s.conns <- server:
		return client, nil
	case <-s.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Accept, Close and Addr make s the server's listener.
func (s *pipeServer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

func (s *pipeServer) Close() error {
	s.once.Do(func() { close(s.done) })
	return nil
}

func (s *pipeServer) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// close stops the server, its connections and the exporter's.
func (s *pipeServer) close(p *Provider) {
	_ = s.srv.Close()
	p.exp.client.CloseIdleConnections()
}

func sampledParent() context.Context {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

// TestExportOnShutdown runs in a synctest bubble (over pipeServer): the
// backoff before the retry of the 503 is on the fake clock.
func TestExportOnShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := &receiver{fail: 1}
		p := New(Config{Endpoint: "http://otel.test/v1/traces", Headers: map[string]string{"Authorization": "Bearer x"}, Interval: time.Hour})
		srv := servePipes(p, rcv)
		defer srv.close(p)
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
	})
}

// TestExportBatches runs in a synctest bubble (over pipeServer): the
// interval is on the fake clock.
func TestExportBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := &receiver{}
		p := New(Config{Endpoint: "http://otel.test", BatchSize: 3, Interval: 10 * time.Millisecond})
		srv := servePipes(p, rcv)
		defer srv.close(p)
		defer func() { _ = p.Shutdown(context.Background()) }()
		tr := p.Tracer("test")
		for range 7 {
			_, s := tr.Start(sampledParent(), "s")
			s.End()
		}
		synctest.Wait() // the two full batches went at once
		if got := len(rcv.got()); got != 6 {
			t.Fatalf("received %d spans, want the 6 of two full batches before the interval", got)
		}
		time.Sleep(10 * time.Millisecond) // virtual time: one interval, which sends the rest
		synctest.Wait()
		if got := len(rcv.got()); got != 7 {
			t.Fatalf("received %d spans, want 7 without Shutdown", got)
		}
	})
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
