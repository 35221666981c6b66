package outbox

import (
	"context"
	"encoding/json"
	"maps"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/migrations"
)

var (
	testTraceID = trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	testSpanID  = trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

const testTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// w3c is the propagator an application usually installs.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// tracedCtx is a context inside a sampled span (as an HTTP handler's is
// once the server middleware extracted the caller's traceparent), with a
// tracestate and one baggage member.
func tracedCtx(t testing.TB) context.Context {
	ts, err := trace.ParseTraceState("vendor=abc")
	if err != nil {
		t.Fatal(err)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: testTraceID, SpanID: testSpanID, TraceFlags: trace.FlagsSampled, TraceState: ts})
	m, err := baggage.NewMember("tenant", "t-7")
	if err != nil {
		t.Fatal(err)
	}
	b, err := baggage.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return baggage.ContextWithBaggage(trace.ContextWithSpanContext(context.Background(), sc), b)
}

// rowHeaders decodes the headers argument of a recorded INSERT (row i of
// call c), nil for SQL NULL.
func rowHeaders(t *testing.T, c call, i int) map[string]string {
	t.Helper()
	v := c.args[(i+1)*columnCountWithHeaders-1]
	if v == nil {
		return nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(v.(string)), &h); err != nil {
		t.Fatal(err)
	}
	return h
}

func TestTraceContextCopiedIntoHeaders(t *testing.T) {
	w := NewWriter(testTable, WithPropagator(w3c))
	r := &recorder{}
	e := validEvent()
	own := maps.Clone(e.Headers)
	if err := w.Append(tracedCtx(t), r, e); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"trace_id": "abc", "traceparent": testTraceparent, "tracestate": "vendor=abc", "baggage": "tenant=t-7"}
	if got := rowHeaders(t, r.calls[0], 0); !maps.Equal(got, want) {
		t.Fatalf("headers = %v, want %v", got, want)
	}
	if !maps.Equal(e.Headers, own) {
		t.Fatalf("Append changed the event's own headers to %v", e.Headers)
	}
}

func TestTraceContextNothingToCarry(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: testTraceID, SpanID: testSpanID, TraceFlags: trace.FlagsSampled})
	for name, tc := range map[string]struct {
		ctx  context.Context
		opts []Option
	}{
		// No span, no baggage: the propagator is never asked.
		"no span": {context.Background(), []Option{WithPropagator(w3c)}},
		// A span, but the application installed no propagator: the
		// global default propagates nothing.
		"global default propagator": {trace.ContextWithSpanContext(context.Background(), sc), nil},
		// An empty composite turns the copy off.
		"empty propagator": {tracedCtx(t), []Option{WithPropagator(propagation.NewCompositeTextMapPropagator())}},
	} {
		t.Run(name, func(t *testing.T) {
			w := NewWriter(testTable, tc.opts...)
			r := &recorder{}
			e := validEvent()
			if err := w.Append(tc.ctx, r, e); err != nil {
				t.Fatal(err)
			}
			if got := rowHeaders(t, r.calls[0], 0); !maps.Equal(got, map[string]string{"trace_id": "abc"}) {
				t.Fatalf("headers = %v, want the event's own", got)
			}
			e.Headers = nil
			if err := w.Append(tc.ctx, r, e); err != nil {
				t.Fatal(err)
			}
			if got := r.calls[1].args[columnCountWithHeaders-1]; got != nil {
				t.Fatalf("headers = %v, want NULL", got)
			}
		})
	}
}

func TestTraceContextGlobalPropagator(t *testing.T) {
	otel.SetTextMapPropagator(w3c)
	// An empty composite is what propagates nothing, like the default.
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
	w := NewWriter(testTable)
	r := &recorder{}
	e := validEvent()
	e.Headers = nil
	if err := w.Append(tracedCtx(t), r, e); err != nil {
		t.Fatal(err)
	}
	if got := rowHeaders(t, r.calls[0], 0)["traceparent"]; got != testTraceparent {
		t.Fatalf("traceparent = %q, want %q", got, testTraceparent)
	}
}

func TestTraceContextEventHeaderWins(t *testing.T) {
	w := NewWriter(testTable, WithPropagator(w3c))
	r := &recorder{}
	e := validEvent()
	e.Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	if err := w.Append(tracedCtx(t), r, e); err != nil {
		t.Fatal(err)
	}
	h := rowHeaders(t, r.calls[0], 0)
	if h["traceparent"] != e.Headers["traceparent"] || h["baggage"] != "tenant=t-7" {
		t.Fatalf("headers = %v: want the event's traceparent and the context's baggage", h)
	}
}

func TestTraceContextBaggageOnly(t *testing.T) {
	w := NewWriter(testTable, WithPropagator(w3c))
	r := &recorder{}
	e := validEvent()
	e.Headers = nil
	ctx := baggage.ContextWithBaggage(context.Background(), baggage.FromContext(tracedCtx(t)))
	if err := w.Append(ctx, r, e); err != nil {
		t.Fatal(err)
	}
	if got := rowHeaders(t, r.calls[0], 0); !maps.Equal(got, map[string]string{"baggage": "tenant=t-7"}) {
		t.Fatalf("headers = %v, want the baggage alone", got)
	}
}

func TestTraceContextAppendBatch(t *testing.T) {
	w := NewWriter(testTable, WithPropagator(w3c))
	r := &recorder{}
	a, b := validEvent(), validEvent()
	b.Headers = nil
	if err := w.AppendBatch(tracedCtx(t), r, []*Event{a, b}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if got := rowHeaders(t, r.calls[0], i)["traceparent"]; got != testTraceparent {
			t.Fatalf("row %d: traceparent = %q, want %q", i, got, testTraceparent)
		}
	}
}

func TestTraceContextTableWithoutHeaders(t *testing.T) {
	w := NewWriter(testTable, WithSchema(migrations.Schema{PayloadType: "jsonb", HasHeaders: false}), WithPropagator(w3c))
	r := &recorder{}
	e := validEvent()
	e.Headers = nil
	if err := w.Append(tracedCtx(t), r, e); err != nil {
		t.Fatal(err)
	}
	if n := len(r.calls[0].args); n != columnCountWithHeaders-1 {
		t.Fatalf("%d values, want %d (no headers column)", n, columnCountWithHeaders-1)
	}
}

// BenchmarkAppendTrace measures what the trace context costs Append. The
// untraced case is an application without OpenTelemetry (or a request
// without a span): compare it with the same benchmark on a Writer before
// tracing existed (docs/tracing.md has the numbers).
func BenchmarkAppendTrace(b *testing.B) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: testTraceID, SpanID: testSpanID, TraceFlags: trace.FlagsSampled})
	spanCtx := trace.ContextWithSpanContext(context.Background(), sc)
	for _, bc := range []struct {
		name string
		ctx  context.Context
		opts []Option
	}{
		{"untraced", context.Background(), nil},
		{"span-no-propagator", spanCtx, nil},
		{"traceparent", spanCtx, []Option{WithPropagator(propagation.TraceContext{})}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := NewWriter(testTable, bc.opts...)
			e := validEvent()
			r := &discard{}
			b.ReportAllocs()
			for b.Loop() {
				e.EventID = [16]byte{1}
				if err := w.Append(bc.ctx, r, e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchKey is a context key of the benchmark.
type benchKey struct{}

// discard is an Execer that does nothing.
type discard struct{}

func (discard) Exec(context.Context, string, ...any) error { return nil }

// BenchmarkTraceHeaders isolates the hook itself: the whole cost an
// untraced Append pays for tracing.
func BenchmarkTraceHeaders(b *testing.B) {
	w := NewWriter(testTable)
	ctx := context.WithValue(context.Background(), benchKey{}, 1) // a request context is rarely Background
	b.ReportAllocs()
	for b.Loop() {
		if w.traceHeaders(ctx) != nil {
			b.Fatal("headers for an untraced context")
		}
	}
}
