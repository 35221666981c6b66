package tracing

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
)

// secret is a credential in the request headers; no output may show it.
const secret = "s3cr3t-t0ken+/="

// receiver is an OTLP/HTTP traces endpoint that decodes each request
// with the official OTLP types, as a collector does.
type receiver struct {
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
	scope    string
	header   http.Header
	path     string
	status   int    // answer this instead of 200, when set
	body     string // with this body
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.header, r.path = req.Header.Clone(), req.URL.Path
	if r.status != 0 {
		http.Error(w, r.body, r.status)
		return
	}
	var m collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &m); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range m.GetResourceSpans() {
		r.resource = map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			r.resource[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			r.scope = ss.GetScope().GetName()
			r.spans = append(r.spans, ss.GetSpans()...)
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
}

func (r *receiver) got() []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracepb.Span(nil), r.spans...)
}

// cleanEnv unsets every OTEL_ variable of the process for the test.
func cleanEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

var (
	parentTrace = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	parentSpan  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

func remoteParent(sampled bool) context.Context {
	flags := trace.TraceFlags(0)
	if sampled {
		flags = trace.FlagsSampled
	}
	return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: parentTrace, SpanID: parentSpan, TraceFlags: flags, Remote: true}))
}

func start(t *testing.T, s Settings, log *slog.Logger) *Provider {
	t.Helper()
	if errs := s.Check(); len(errs) > 0 {
		t.Fatalf("Check: %v", errs)
	}
	p, err := Start(context.Background(), s, log)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSpansReachTheReceiver: a child of a sampled remote parent arrives
// with its attributes, kind, parent and flags, under the resource and the
// scope, with the request headers of OTEL_EXPORTER_OTLP_HEADERS; children
// of unsampled parents and roots are not recorded (parent-based, no roots).
func TestSpansReachTheReceiver(t *testing.T) {
	cleanEnv(t)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20"+secret+",x-test=yes")
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	p := start(t, Settings{Endpoint: srv.URL, Service: "outbox-relay", Version: "v1.2.3"}, slog.New(slog.DiscardHandler))
	tr := p.Tracer("github.com/outbox-relay/outbox-relay/relay")
	_, s := tr.Start(remoteParent(true), "publish outbox.event.order", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.String("messaging.system", "kafka"), attribute.String("messaging.message.id", "e-1")))
	s.End()
	_, unsampled := tr.Start(remoteParent(false), "unsampled")
	unsampled.End()
	_, root := tr.Start(context.Background(), "root")
	root.End()
	if unsampled.IsRecording() || root.IsRecording() || unsampled.SpanContext().TraceID() != parentTrace {
		t.Fatalf("unsampled child or root recorded")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := rcv.got()
	if len(got) != 1 {
		t.Fatalf("%d spans received, want 1", len(got))
	}
	sp := got[0]
	if hex.EncodeToString(sp.GetTraceId()) != parentTrace.String() || hex.EncodeToString(sp.GetParentSpanId()) != parentSpan.String() ||
		sp.GetName() != "publish outbox.event.order" || sp.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER || sp.GetFlags() != 0x301 {
		t.Errorf("span trace %x parent %x name %q kind %v flags %#x", sp.GetTraceId(), sp.GetParentSpanId(), sp.GetName(), sp.GetKind(), sp.GetFlags())
	}
	attrs := map[string]string{}
	for _, kv := range sp.GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	if attrs["messaging.system"] != "kafka" || attrs["messaging.message.id"] != "e-1" {
		t.Errorf("attributes %v", attrs)
	}
	if rcv.resource["service.name"] != "outbox-relay" || rcv.resource["service.version"] != "v1.2.3" || rcv.resource["telemetry.sdk.language"] != "go" {
		t.Errorf("resource %v", rcv.resource)
	}
	if rcv.scope != "github.com/outbox-relay/outbox-relay/relay" || rcv.path != "/v1/traces" {
		t.Errorf("scope %q path %q", rcv.scope, rcv.path)
	}
	if rcv.header.Get("Authorization") != "Bearer "+secret || rcv.header.Get("X-Test") != "yes" || rcv.header.Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("request headers %v", rcv.header)
	}
	if p.Dropped() != 0 {
		t.Errorf("Dropped = %d", p.Dropped())
	}
}

// TestEnvironment: the standard variables the SDK reads apply (endpoint
// as a base URL, service name, sampler), and --otlp-endpoint wins over
// OTEL_EXPORTER_OTLP_ENDPOINT.
func TestEnvironment(t *testing.T) {
	rcv := &receiver{}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	for _, c := range []struct {
		name, flag, path string
		env              map[string]string
	}{
		{"base URL", "", "/base/v1/traces", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL + "/base"}},
		{"traces URL as is", "", "/custom", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": srv.URL + "/custom", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}},
		{"the flag wins", srv.URL, "/v1/traces", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:1"}},
		{"the flag's path", srv.URL + "/otlp/traces", "/otlp/traces", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cleanEnv(t)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			t.Setenv("OTEL_SERVICE_NAME", "shipping-relay")
			t.Setenv("OTEL_TRACES_SAMPLER", "always_on") // roots too
			p := start(t, Settings{Endpoint: c.flag, Service: "outbox-relay"}, slog.New(slog.DiscardHandler))
			before := len(rcv.got())
			_, s := p.Tracer("t").Start(context.Background(), "root")
			s.End()
			if err := p.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if len(rcv.got()) != before+1 || rcv.path != c.path || rcv.resource["service.name"] != "shipping-relay" {
				t.Fatalf("spans %d (want %d), path %q (want %q), resource %v", len(rcv.got()), before+1, rcv.path, c.path, rcv.resource)
			}
		})
	}
}

// TestSecretNeverPrinted: a header token reaches no error of Check and,
// through the binary's redacting writer, no log line - not even when the
// collector refuses it and echoes it in its answer, which the SDK's error
// quotes.
func TestSecretNeverPrinted(t *testing.T) {
	cleanEnv(t)
	rcv := &receiver{status: http.StatusUnauthorized, body: "invalid token " + secret}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	var out bytes.Buffer
	w := redact.NewWriter(&out)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20"+secret)
	w.Add(HeaderSecrets()...) // as config.Secrets does
	log := slog.New(slog.NewJSONHandler(w, nil))
	p := start(t, Settings{Endpoint: srv.URL, Service: "outbox-relay"}, log)
	_, s := p.Tracer("t").Start(remoteParent(true), "s")
	s.End()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Dropped() != 1 {
		t.Errorf("Dropped = %d, want 1 (401 is not retried)", p.Dropped())
	}
	if !strings.Contains(out.String(), "401") {
		t.Errorf("the export failure is not logged: %s", out.String())
	}
	if strings.Contains(out.String(), "s3cr3t") {
		t.Errorf("log shows the secret: %s", out.String())
	}

	// Malformed headers: the SDK would log the entry; Check refuses it
	// without quoting it.
	for _, bad := range []string{"authorization Bearer " + secret, "authorization=Bearer%zz" + secret, "bad key=" + secret} {
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", bad)
		errs := Settings{Endpoint: srv.URL}.Check()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "OTEL_EXPORTER_OTLP_TRACES_HEADERS") || strings.Contains(errs[0].Error(), "s3cr3t") {
			t.Errorf("%q: %v", bad, errs)
		}
	}
}

// TestCheck: what the SDK would only log about is a start-up error, and
// no message quotes a credential of the endpoint.
func TestCheck(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag string
		env  map[string]string
		want string // in the one error; "" for none
	}{
		{"http://127.0.0.1:4318", nil, ""},
		{"https://otel.example/v1/traces", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_BSP_MAX_QUEUE_SIZE": "100"}, ""},
		{"127.0.0.1:4318", nil, "want http://host:port"},
		{"grpc://x:4317", nil, "--otlp-endpoint: want http://host:port"},
		{"http://", nil, "--otlp-endpoint: want http://host:port"},
		{"::", nil, "--otlp-endpoint: not a URL"},
		{"http://user:s3cr3t-pw@otel.example:4318", nil, "credentials in the URL are not sent"},
		{"http://user:" + secret + "@otel.example:4318", nil, "not a URL"}, // the / ends the authority
		{"http://otel.example:4318/v1/traces?api-key=" + secret, nil, "a query or fragment is not sent"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "otel.example:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT: want http://host:port"},
		{"", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://u:s3cr3t-pw@h"}, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: http://h: credentials"},
		{"http://h", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://u:s3cr3t-pw@h:bad"}, "OTEL_EXPORTER_OTLP_ENDPOINT: not a URL (--otlp-endpoint wins"},
		{"http://h", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "otel.example:4318"}, ""}, // unused, and the SDK says nothing of it
		{"http://h", map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "exports OTLP/HTTP only"},
		{"http://h", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "zstd"}, "want gzip or none"},
		{"http://h", map[string]string{"OTEL_EXPORTER_OTLP_TIMEOUT": "10s"}, "OTEL_EXPORTER_OTLP_TIMEOUT=10s: want a positive whole number"},
		{"http://h", map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER=jaeger_remote"},
		{"http://h", map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, "want a ratio from 0 to 1"},
		{"https://h", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": notPEM}, "OTEL_EXPORTER_OTLP_CERTIFICATE: no PEM certificate"},
		{"https://h", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": filepath.Join(dir, "missing.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open"},
		{"https://h", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": notPEM}, "CLIENT_KEY"},
		{"http://h", map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "team"}, "OTEL_RESOURCE_ATTRIBUTES"},
	} {
		cleanEnv(t)
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		errs := Settings{Endpoint: c.flag}.Check()
		switch {
		case c.want == "" && len(errs) > 0:
			t.Errorf("%q %v: %v", c.flag, c.env, errs)
		case c.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want)):
			t.Errorf("%q %v: %v, want one error with %q", c.flag, c.env, errs, c.want)
		case len(errs) == 1 && strings.Contains(errs[0].Error(), "s3cr3t"):
			t.Errorf("%q: the error shows the secret: %v", c.flag, errs[0])
		}
	}
}

// TestShutdownBounded: a collector that never answers costs Shutdown its
// context's time, no more, and the span counts as dropped.
func TestShutdownBounded(t *testing.T) {
	cleanEnv(t)
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	p := start(t, Settings{Endpoint: srv.URL}, slog.New(slog.DiscardHandler))
	_, s := p.Tracer("t").Start(remoteParent(true), "s")
	s.End()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	if err := p.Shutdown(ctx); err == nil {
		t.Error("Shutdown returned nil with a collector that never answers")
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("Shutdown took %s", d)
	}
	if p.Dropped() != 1 {
		t.Errorf("Dropped = %d, want 1", p.Dropped())
	}
}

// BenchmarkPublishSpanExport is the SDK's side of the relay's publish span
// on the drain path: a span of a sampled (or unsampled) remote parent, or
// a root (an untraced event), started with the relay's 7 attributes, ended, and, when sampled, batched,
// encoded and posted to a local OTLP/HTTP receiver that discards it. The
// relay's own side is BenchmarkPublishSpan in package relay;
// docs/tracing.md adds the two. cpu-ns/op is the process's CPU time per
// span (every core: the export runs beside the caller).
func BenchmarkPublishSpanExport(b *testing.B) {
	for _, k := range []string{"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_TRACES_SAMPLER"} {
		b.Setenv(k, "")
		os.Unsetenv(k)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	defer srv.Close()
	attrs := []attribute.KeyValue{attribute.String("messaging.system", "kafka"), attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "publish"), attribute.String("messaging.destination.name", "outbox.event.order"),
		attribute.String("messaging.message.id", "0190a0b0-0000-7000-8000-000000000001"), attribute.String("messaging.kafka.message.key", "o-1"),
		attribute.String("outbox.event_type", "order.confirmed")}
	for _, bc := range []struct {
		name   string
		parent context.Context
	}{{"sampled", remoteParent(true)}, {"unsampled", remoteParent(false)}, {"untraced", context.Background()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.Setenv("OTEL_BSP_MAX_QUEUE_SIZE", "65536") // measure the export, not the drops
			p, err := Start(context.Background(), Settings{Endpoint: srv.URL, Service: "bench"}, slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			tr := p.Tracer("bench")
			parent := bc.parent
			cpu0 := cpuTime()
			b.ReportAllocs()
			for b.Loop() {
				_, s := tr.Start(parent, "publish outbox.event.order", trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
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
