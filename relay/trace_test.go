package relay

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/outbox-relay/outbox-relay/internal/testutil/spantest"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

func tracedRelay(t testing.TB, tp trace.TracerProvider) *Relay {
	tmpl, err := publisher.ParseTopicTemplate("outbox.{aggregate_type}")
	if err != nil {
		t.Fatal(err)
	}
	return &Relay{opts: options{tracerProvider: tp}, c: compiled{template: tmpl}}
}

func spanEvent(headers string) *replication.WALEvent {
	ev := &replication.WALEvent{Row: record.Row{EventID: "0190a0b0-0000-7000-8000-000000000001", AggregateType: "order", AggregateID: "o-1", EventType: "order.paid"}}
	if headers != "" {
		ev.Headers = []byte(headers)
	}
	return ev
}

// countAck counts acknowledgements.
type countAck struct{ n atomic.Int64 }

func (a *countAck) Ack(int) { a.n.Add(1) }

func TestPublishSpansOffByDefault(t *testing.T) {
	if s := tracedRelay(t, nil).publishSpans(); s != nil {
		t.Fatal("spans without a TracerProvider")
	}
	if s := tracedRelay(t, noop.NewTracerProvider()).publishSpans(); s != nil {
		t.Fatal("spans with a noop TracerProvider")
	}
}

func TestPublishSpanChildOfProducer(t *testing.T) {
	tp := &spantest.Provider{}
	ps := tracedRelay(t, tp).publishSpans()
	inner := &countAck{}
	ack := ps.start(spanEvent(`{"tenant": "t-7", "traceparent": "00-`+producerTrace+`-`+producerSpan+`-01"}`), inner)
	s := tp.Only(t)
	if s.Ended() {
		t.Fatal("span ended before the acknowledgement")
	}
	ack.Ack(10)
	if !s.Ended() || inner.n.Load() != 1 {
		t.Fatalf("after Ack: span ended %v, inner acks %d; want ended and 1", s.Ended(), inner.n.Load())
	}
	if s.Name != "publish outbox.order" || s.Kind != trace.SpanKindProducer {
		t.Fatalf("span %q kind %v, want producer span \"publish outbox.order\"", s.Name, s.Kind)
	}
	if s.Parent.TraceID().String() != producerTrace || s.Parent.SpanID().String() != producerSpan || !s.Parent.IsRemote() {
		t.Fatalf("parent = %v, want the producer's remote span", s.Parent)
	}
	for k, want := range map[attribute.Key]string{
		"messaging.system": "kafka", "messaging.operation.type": "send", "messaging.destination.name": "outbox.order",
		"messaging.message.id": "0190a0b0-0000-7000-8000-000000000001", "messaging.kafka.message.key": "o-1", "outbox.event_type": "order.paid",
	} {
		if got := s.Attrs[k].AsString(); got != want {
			t.Errorf("attribute %s = %q, want %q", k, got, want)
		}
	}
}

func TestPublishSpanWithoutProducer(t *testing.T) {
	for name, headers := range map[string]string{"no headers": "", "no traceparent": `{"tenant":"t-7"}`, "not JSON": `{"traceparent":`} {
		t.Run(name, func(t *testing.T) {
			tp := &spantest.Provider{}
			tracedRelay(t, tp).publishSpans().start(spanEvent(headers), &countAck{}).Ack(1)
			if s := tp.Only(t); s.Parent.IsValid() {
				t.Fatalf("parent %v, want a root span (the sampler decides)", s.Parent)
			}
		})
	}
}

func TestPublishSpanUnsampledProducer(t *testing.T) {
	tp := &spantest.Provider{}
	inner := &countAck{}
	ack := tracedRelay(t, tp).publishSpans().start(spanEvent(`{"traceparent":"00-`+producerTrace+`-`+producerSpan+`-00"}`), inner)
	if ack != publisher.Acker(inner) {
		t.Fatalf("ack = %T, want the event's own acker back (no span recorded)", ack)
	}
	if n := len(tp.Spans()); n != 0 {
		t.Fatalf("%d spans recorded for an unsampled producer trace", n)
	}
}

func TestPublishSpanFailed(t *testing.T) {
	tp := &spantest.Provider{}
	ack := tracedRelay(t, tp).publishSpans().start(spanEvent(""), &countAck{})
	failSpan(ack, errors.New("stopping"))
	if s := tp.Only(t); !s.Ended() || s.Status != codes.Error || s.Errors != 1 {
		t.Fatalf("ended %v status %v errors %d, want an ended error span", s.Ended(), s.Status, s.Errors)
	}
	failSpan(&countAck{}, errors.New("no span")) // no span: nothing to do
}

// BenchmarkPublishSpan is the relay's own per-event cost of the publish
// span on the drain path: the producer's context read from the row's
// headers, the span started at the hand-off and ended at the
// acknowledgement, on a TracerProvider that samples as its parent did and
// keeps nothing (discardProvider; the binary's
// SDK and exporter have their own benchmark, BenchmarkPublishSpanExport in
// cmd/outbox-relay/internal/tracing). off is the path without tracing;
// sampled is every event in a sampled producer trace; unsampled an event
// whose producer trace was not sampled; untraced an event without a
// traceparent (a root, not sampled). cpu-ns/op is the process's CPU time
// per event.
func BenchmarkPublishSpan(b *testing.B) {
	sampled := `{"traceparent":"00-` + producerTrace + `-` + producerSpan + `-01"}`
	unsampled := `{"traceparent":"00-` + producerTrace + `-` + producerSpan + `-00"}`
	for _, bc := range []struct {
		name    string
		on      bool
		headers string
	}{{"off", false, sampled}, {"sampled", true, sampled}, {"unsampled", true, unsampled}, {"untraced", true, `{"tenant":"t-7"}`}} {
		b.Run(bc.name, func(b *testing.B) {
			var ps *publishSpans
			if bc.on {
				ps = tracedRelay(b, discardProvider{}).publishSpans()
			}
			ev := spanEvent(bc.headers)
			inner := &countAck{}
			cpu0 := cpuTime()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var ack publisher.Acker = inner
				if ps != nil {
					ack = ps.start(ev, ack)
				}
				ack.Ack(1)
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// discardProvider records a span when its parent was sampled, like a
// parent-based sampler, and keeps nothing of it: what is left of a
// span's cost is the relay's own.
type discardProvider struct{ embedded.TracerProvider }

func (discardProvider) Tracer(string, ...trace.TracerOption) trace.Tracer { return discardTracer{} }

type discardTracer struct{ embedded.Tracer }

func (discardTracer) Start(ctx context.Context, _ string, _ ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanContextFromContext(ctx)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: parent.TraceID(), SpanID: trace.SpanID{1},
		TraceFlags: parent.TraceFlags()})
	s := &discardSpan{sc: sc}
	return trace.ContextWithSpan(ctx, s), s
}

type discardSpan struct {
	noop.Span
	sc trace.SpanContext
}

func (s *discardSpan) IsRecording() bool                   { return s.sc.IsSampled() }
func (s *discardSpan) SpanContext() trace.SpanContext      { return s.sc }
func (s *discardSpan) SetAttributes(...attribute.KeyValue) {}

// cpuTime is the process's user and system CPU time in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func TestJSONCarrier(t *testing.T) {
	for _, tc := range []struct {
		raw, key, want string
	}{
		{`{"traceparent":"00-a-b-01"}`, "traceparent", "00-a-b-01"},
		{` { "a" : "1" , "traceparent" : "tp" } `, "traceparent", "tp"},
		{`{"a":"1"}`, "traceparent", ""},
		{`{}`, "traceparent", ""},
		// Not plain: decoded with encoding/json instead.
		{`{"a":"x\"y","traceparent":"tp"}`, "traceparent", "tp"},
		{`{"tr\u0061ceparent":"tp"}`, "traceparent", "tp"},
		{`{"traceparent":"t\u0070"}`, "traceparent", "tp"},
		// Not a flat object of strings: nothing.
		{`{"n":1,"traceparent":"tp"}`, "traceparent", ""},
		{`["traceparent"]`, "traceparent", ""},
		{`{"traceparent":`, "traceparent", ""},
		{`null`, "traceparent", ""},
	} {
		if got := (&jsonCarrier{raw: []byte(tc.raw)}).Get(tc.key); got != tc.want {
			t.Errorf("Get(%q) of %s = %q, want %q", tc.key, tc.raw, got, tc.want)
		}
	}
	keys := (&jsonCarrier{raw: []byte(`{"a":"1","b":"2"}`)}).Keys()
	if len(keys) != 2 {
		t.Errorf("Keys = %v, want a and b", keys)
	}
}

// FuzzScanHeader checks the fast scan against encoding/json: whenever it
// answers, it answers what a full decode says.
func FuzzScanHeader(f *testing.F) {
	for _, s := range []string{`{"traceparent":"x"}`, `{"a":"b", "traceparent" : "c"}`, `{}`, `{"a":1}`, `{"a":"\u0041"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, ok := scanHeader([]byte(raw), "traceparent")
		if !ok {
			return
		}
		var m map[string]string
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatalf("scan accepted %q, json says %v", raw, err)
		}
		if m["traceparent"] != v {
			t.Fatalf("scan %q, json %q", v, m["traceparent"])
		}
	})
}
