package tracing

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/relay"
)

// otlpReceiver is an OTLP/HTTP traces endpoint that decodes every request
// with the official OTLP protobuf types, as a collector would.
type otlpReceiver struct {
	t        *testing.T
	mu       sync.Mutex
	spans    []receivedSpan
	requests int
	bad      []string
	header   http.Header // of the last request
}

type receivedSpan struct {
	span     *tracepb.Span
	resource map[string]string
	scope    string
}

func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.header = req.Header.Clone()
	var m collectorpb.ExportTraceServiceRequest
	switch {
	case err != nil:
		r.bad = append(r.bad, err.Error())
	case req.URL.Path != "/v1/traces" || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf":
		r.bad = append(r.bad, fmt.Sprintf("%s %s, Content-Type %q", req.Method, req.URL.Path, req.Header.Get("Content-Type")))
	default:
		if err := proto.Unmarshal(body, &m); err != nil {
			r.bad = append(r.bad, "protobuf: "+err.Error())
			w.WriteHeader(http.StatusBadRequest)
			return
		}
	}
	for _, rs := range m.GetResourceSpans() {
		res := map[string]string{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				r.spans = append(r.spans, receivedSpan{span: s, resource: res, scope: ss.GetScope().GetName()})
			}
		}
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

func (r *otlpReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// buildBinary builds cmd/outbox-relay of the module under test (the
// replace directive points at this checkout) into dir.
func buildBinary(t testing.TB, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "outbox-relay")
	// Built in the root module, as a release is: this module's go.sum
	// covers what it imports, not every dependency of the binary.
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/outbox-relay")
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// headerSecret is a credential in the export requests' headers: it must
// reach the receiver and never the relay's output.
const headerSecret = "interop-otlp-token-1"

// relayProcess is a running outbox-relay binary.
type relayProcess struct {
	cmd  *exec.Cmd
	logs *bytes.Buffer
	done chan error
}

// runBinary starts `outbox-relay run` for cfg's slot, publication and
// topics, with extra flags.
func runBinary(t testing.TB, bin string, cfg relay.Config, extra ...string) *relayProcess {
	t.Helper()
	args := append([]string{"run",
		"--database-url", cfg.Database.URL, "--kafka-brokers", strings.Join(cfg.Kafka.Brokers, ","),
		"--table", cfg.Database.Table, "--slot", cfg.Database.Slot, "--publication", cfg.Database.Publication,
		"--topic-template", cfg.Publish.TopicTemplate, "--metrics-addr", "", "--stats-interval", "0",
		"--leader-poll-interval", "250ms", "--log-format", "console",
	}, extra...)
	p := &relayProcess{cmd: exec.Command(bin, args...), logs: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "OTEL_SERVICE_NAME=interop-relay",
		"OTEL_EXPORTER_OTLP_HEADERS=x-test=yes,authorization=Bearer%20" + headerSecret}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop sends SIGTERM (the relay drains and flushes its spans) and waits.
func (p *relayProcess) stop(t testing.TB) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			t.Errorf("outbox-relay: %v\n%s", err, p.logs)
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		t.Errorf("outbox-relay did not stop within 30 s\n%s", p.logs)
	}
}

// cpu returns the process's CPU time so far (utime + stime, 10 ms
// resolution).
func (p *relayProcess) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// TestBinaryExportsPublishSpans runs the outbox-relay binary with
// --trace-publish and --otlp-endpoint pointed at a receiver that decodes
// the requests with the official OTLP types: the publish span is a
// producer span in the request's trace, child of the request span, with
// the messaging attributes, the resource and the scope; an event without
// a trace context gets no span (the binary records only sampled producer
// traces).
func TestBinaryExportsPublishSpans(t *testing.T) {
	w := newWorld(t)
	cfg, topic := w.relayConfig("bin")
	rcv := &otlpReceiver{t: t}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	bin := buildBinary(t, t.TempDir())

	f := &flow{w: w, producer: newRecorder()}
	req, ids := f.produce(t, true, "o-1")
	_, _ = f.produce(t, false, "o-2")
	p := runBinary(t, bin, cfg, "--trace-publish", "--otlp-endpoint", srv.URL)
	eventually(t, 60*time.Second, "both events in Kafka", func() bool {
		n, err := w.records(context.Background(), topic)
		return err == nil && n == 2
	})
	p.stop(t) // flushes the spans
	spans := rcv.received()
	if len(rcv.bad) > 0 {
		t.Fatalf("bad requests: %v", rcv.bad)
	}
	if len(spans) != 1 {
		t.Fatalf("%d spans received, want 1 (the traced event's; the untraced one is not sampled)\n%s", len(spans), p.logs)
	}
	got := spans[0]
	s := got.span
	tid, sid := req.TraceID(), req.SpanID()
	if !bytes.Equal(s.GetTraceId(), tid[:]) || !bytes.Equal(s.GetParentSpanId(), sid[:]) {
		t.Errorf("trace %x parent %x, want trace %s parent %s", s.GetTraceId(), s.GetParentSpanId(), tid, sid)
	}
	if len(s.GetSpanId()) != 8 || s.GetName() != "publish "+topic || s.GetKind() != tracepb.Span_SPAN_KIND_PRODUCER {
		t.Errorf("span id %x name %q kind %v", s.GetSpanId(), s.GetName(), s.GetKind())
	}
	// Sampled, and "the parent is remote" (SpanFlags bits 8 and 9).
	if s.GetFlags() != 0x301 {
		t.Errorf("flags %#x, want 0x301", s.GetFlags())
	}
	if d := time.Duration(s.GetEndTimeUnixNano() - s.GetStartTimeUnixNano()); s.GetStartTimeUnixNano() == 0 || d <= 0 || d > time.Minute {
		t.Errorf("start %d end %d", s.GetStartTimeUnixNano(), s.GetEndTimeUnixNano())
	}
	attrs := map[string]*commonpb.AnyValue{}
	for _, kv := range s.GetAttributes() {
		attrs[kv.GetKey()] = kv.GetValue()
	}
	for k, want := range map[string]string{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.destination.name": topic,
		"messaging.message.id": ids[0], "messaging.kafka.message.key": "o-1", "outbox.event_type": "order.placed",
	} {
		if v := attrs[k].GetStringValue(); v != want {
			t.Errorf("attribute %s = %q, want %q", k, v, want)
		}
	}
	if got.resource["service.name"] != "interop-relay" || got.resource["service.version"] == "" {
		t.Errorf("resource %v, want service.name from OTEL_SERVICE_NAME and a version", got.resource)
	}
	if h := rcv.header.Get("x-test"); h != "yes" || rcv.header.Get("Authorization") != "Bearer "+headerSecret {
		t.Errorf("request headers x-test = %q, Authorization = %q: want OTEL_EXPORTER_OTLP_HEADERS'", h, rcv.header.Get("Authorization"))
	}
	if strings.Contains(p.logs.String(), headerSecret) {
		t.Errorf("the relay's output shows the header's secret:\n%s", p.logs)
	}
	if got.resource["telemetry.sdk.name"] != "opentelemetry" {
		t.Errorf("resource %v, want the SDK's telemetry.sdk.* attributes", got.resource)
	}
	if got.scope != relay.ScopeName {
		t.Errorf("scope %q, want %q", got.scope, relay.ScopeName)
	}
}

// TestDrainCost measures the optional publish span on a short drain of the
// binary: the same backlog drained by two relays with slots of their own,
// without and with --trace-publish (every event in a sampled producer
// trace, spans sent to a local receiver). It reports events/s and the
// relay's CPU per event. Set TRACING_DRAIN_EVENTS (e.g. 50000) to run it;
// docs/tracing.md has the numbers.
func TestDrainCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("TRACING_DRAIN_EVENTS"))
	if n <= 0 {
		t.Skip("set TRACING_DRAIN_EVENTS=N to measure the publish span's cost on a drain of N events")
	}
	rounds, _ := strconv.Atoi(os.Getenv("TRACING_DRAIN_ROUNDS"))
	rounds = max(rounds, 1)
	w := newWorld(t)
	rcv := &otlpReceiver{t: t}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	bin := buildBinary(t, t.TempDir())
	type run struct {
		name  string
		extra []string
		cfg   relay.Config
		topic string
	}
	var runs []run
	for i := range rounds {
		for _, r := range []run{{name: "off"}, {name: "on", extra: []string{"--trace-publish", "--otlp-endpoint", srv.URL}}} {
			r.cfg, r.topic = w.relayConfig(fmt.Sprintf("%s%d", r.name, i))
			runs = append(runs, r)
		}
	}
	// The backlog: one traced request per 500 events.
	f := &flow{w: w, producer: newRecorder()}
	ctx := context.Background()
	wr := outbox.NewWriter(w.table, outbox.WithPropagator(w3c))
	for done := 0; done < n; done += 500 {
		rctx, span := f.producer.Tracer("orders-service").Start(ctx, "POST /orders")
		tx, err := w.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var evs []*outbox.Event
		for i := done; i < min(done+500, n); i++ {
			a := "o-" + strconv.Itoa(i%1000)
			evs = append(evs, &outbox.Event{AggregateType: "order", AggregateID: a, AggregateVersion: int64(i/1000 + 1), EventType: "order.placed",
				SchemaVersion: 1, Payload: []byte(`{"id":"` + a + `","amount":1234}`)})
		}
		if err := wr.AppendBatch(rctx, outbox.PgxTx(tx), evs); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		span.End()
	}
	for _, r := range runs {
		before := len(rcv.received())
		start := time.Now()
		p := runBinary(t, bin, r.cfg, r.extra...)
		eventually(t, 5*time.Minute, "the drain", func() bool {
			got, err := w.records(ctx, r.topic)
			return err == nil && got >= int64(n)
		})
		elapsed := time.Since(start)
		cpu, err := p.cpu()
		if err != nil {
			t.Fatal(err)
		}
		p.stop(t)
		t.Logf("drain %-3s: %d events in %s: %.0f events/s, relay CPU %s (%.2f µs per event), spans exported %d",
			r.name, n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), cpu, float64(cpu.Microseconds())/float64(n), len(rcv.received())-before)
	}
}
