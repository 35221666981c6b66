package tracing

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
)

// w3c is what an application installs as its propagator.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// recorder is an SDK TracerProvider whose spans are kept in memory: one
// per process role (the producing service, the relay, the consumer).
type recorder struct {
	*sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newRecorder() recorder {
	rec := tracetest.NewSpanRecorder()
	return recorder{sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), rec}
}

// named returns the ended spans whose name starts with prefix.
func (r recorder) named(prefix string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.rec.Ended() {
		if strings.HasPrefix(s.Name(), prefix) {
			out = append(out, s)
		}
	}
	return out
}

// attr returns s's attribute key.
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// applied is what the consumer's handler saw of one event.
type applied struct {
	id      string
	headers map[string]string
	span    trace.SpanContext // the handler's own span
	parent  trace.SpanContext // the span its ctx carried (the inbox's)
}

// flow is one run of producer → relay → consumer for a test.
type flow struct {
	w        *world
	producer recorder
	relay    recorder
	consumer recorder
	topic    string

	mu   sync.Mutex
	seen map[string]applied
}

// start runs an in-process relay (the relay package, with the relay
// recorder: the binary's exporter is checked by
// TestBinaryExportsPublishSpans) and an inbox consumer with handler or
// batch set, both stopped when the test ends.
func start(t *testing.T, batch bool) *flow {
	w := newWorld(t)
	f := &flow{w: w, producer: newRecorder(), relay: newRecorder(), consumer: newRecorder(), seen: map[string]applied{}}
	cfg, topic := w.relayConfig("r")
	f.topic = topic
	r, err := relay.New(cfg, relay.WithTracerProvider(f.relay))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Run(ctx) }()

	schema := w.inboxSchema("inbox")
	if err := inbox.Migrate(context.Background(), w.db, schema); err != nil {
		t.Fatal(err)
	}
	handlerTracer := f.consumer.Tracer("billing-handler")
	apply := func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		parent := trace.SpanContextFromContext(ctx)
		// The handler's own work: a span of its own and a statement.
		ctx, span := handlerTracer.Start(ctx, "apply "+ev.EventType)
		defer span.End()
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		f.mu.Lock()
		f.seen[ev.ID] = applied{id: ev.ID, headers: ev.Headers, span: span.SpanContext(), parent: parent}
		f.mu.Unlock()
		return nil
	}
	icfg := inbox.Config{
		Name: "tr-" + w.sfx, Brokers: w.cfg.Kafka.Brokers, Topics: []string{topic}, Pool: w.db, Schema: schema,
		BatchLinger: 50 * time.Millisecond,
	}
	if batch {
		icfg.BatchHandler = func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
			for _, ev := range evs {
				if err := apply(ctx, tx, ev); err != nil {
					return err
				}
			}
			return nil
		}
	} else {
		icfg.Handler = apply
	}
	c, err := inbox.New(icfg, inbox.WithTracerProvider(f.consumer), inbox.WithPropagator(w3c))
	if err != nil {
		t.Fatal(err)
	}
	consumerDone := make(chan error, 1)
	go func() { consumerDone <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for _, done := range []chan error{relayDone, consumerDone} {
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("stopping: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("relay or consumer did not stop within 30 s")
			}
		}
	})
	return f
}

// produce writes events in one transaction, as a service's request
// handler does: inside a span of its own when traced.
func (f *flow) produce(t *testing.T, traced bool, aggregates ...string) (trace.SpanContext, []string) {
	t.Helper()
	ctx := context.Background()
	var span trace.Span
	if traced {
		ctx, span = f.producer.Tracer("orders-service").Start(ctx, "POST /orders")
	}
	w := outbox.NewWriter(f.w.table, outbox.WithPropagator(w3c))
	tx, err := f.w.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	var evs []*outbox.Event
	for _, a := range aggregates {
		evs = append(evs, &outbox.Event{AggregateType: "order", AggregateID: a, AggregateVersion: 1, EventType: "order.placed",
			SchemaVersion: 1, Payload: []byte(`{"id":"` + a + `"}`), Headers: map[string]string{"tenant": "t-7"}})
	}
	if err := w.AppendBatch(ctx, outbox.PgxTx(tx), evs); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range evs {
		ids = append(ids, e.EventID.String())
	}
	if !traced {
		return trace.SpanContext{}, ids
	}
	span.End()
	return span.SpanContext(), ids
}

// wait waits until the consumer applied n events and the relay ended n
// publish spans.
func (f *flow) wait(t *testing.T, n int) {
	eventually(t, 60*time.Second, "the consumer to apply the events", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.seen) >= n
	})
	eventually(t, 10*time.Second, "the relay's publish spans", func() bool { return len(f.relay.named("publish ")) >= n })
}

func (f *flow) applied(id string) applied {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[id]
}

// TestTraceProducerRelayConsumer: one HTTP-request span writes two events;
// the relay's publish spans and the consumer's spans (and the handler's
// own spans under them) are all in that trace, with the right parents. An
// event written without a span starts traces of its own downstream.
func TestTraceProducerRelayConsumer(t *testing.T) {
	f := start(t, false)
	req, ids := f.produce(t, true, "o-1", "o-2")
	_, untraced := f.produce(t, false, "o-3")
	f.wait(t, 3)

	tid := req.TraceID()
	publish := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range f.relay.named("publish ") {
		publish[attr(s, "messaging.message.id").AsString()] = s
	}
	process := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range f.consumer.named("process ") {
		process[attr(s, "messaging.message.id").AsString()] = s
	}
	for _, id := range ids {
		a := f.applied(id)
		if tp := a.headers["traceparent"]; !strings.HasPrefix(tp, "00-"+tid.String()+"-"+req.SpanID().String()) {
			t.Errorf("event %s: traceparent header %q, want the request span's", id, tp)
		}
		if a.headers["tenant"] != "t-7" || a.headers["baggage"] != "" {
			t.Errorf("event %s: headers %v: want the event's own and no baggage (none was set)", id, a.headers)
		}
		p := publish[id]
		if p == nil {
			t.Fatalf("event %s: no publish span", id)
		}
		if p.SpanContext().TraceID() != tid || p.Parent().SpanID() != req.SpanID() || !p.Parent().IsRemote() || p.SpanKind() != trace.SpanKindProducer {
			t.Errorf("event %s: publish span trace %s parent %s (remote %v) kind %v; want trace %s, parent the request span %s, producer",
				id, p.SpanContext().TraceID(), p.Parent().SpanID(), p.Parent().IsRemote(), p.SpanKind(), tid, req.SpanID())
		}
		if p.Name() != "publish "+f.topic || attr(p, "messaging.destination.name").AsString() != f.topic {
			t.Errorf("event %s: publish span %q, destination %q; want topic %s", id, p.Name(), attr(p, "messaging.destination.name").AsString(), f.topic)
		}
		c := process[id]
		if c == nil {
			t.Fatalf("event %s: no consumer span", id)
		}
		if c.SpanContext().TraceID() != tid || c.Parent().SpanID() != req.SpanID() || c.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("event %s: consumer span trace %s parent %s kind %v; want trace %s, parent the request span, consumer",
				id, c.SpanContext().TraceID(), c.Parent().SpanID(), c.SpanKind(), tid)
		}
		if !a.parent.Equal(c.SpanContext()) {
			t.Errorf("event %s: the handler's ctx carried %v, want the consumer span %v", id, a.parent, c.SpanContext())
		}
		if a.span.TraceID() != tid {
			t.Errorf("event %s: the handler's own span is in trace %s, want %s", id, a.span.TraceID(), tid)
		}
	}
	// The handler's own spans hang under the consumer spans.
	for _, h := range f.consumer.named("apply ") {
		if h.SpanContext().TraceID() == tid {
			found := false
			for _, c := range process {
				if h.Parent().SpanID() == c.SpanContext().SpanID() {
					found = true
				}
			}
			if !found {
				t.Errorf("handler span %s has parent %s, not a consumer span", h.Name(), h.Parent().SpanID())
			}
		}
	}
	// One trace: the request, two publish spans, two consumer spans, two
	// handler spans.
	n := 0
	for _, r := range []recorder{f.producer, f.relay, f.consumer} {
		for _, s := range r.rec.Ended() {
			if s.SpanContext().TraceID() == tid {
				n++
			}
		}
	}
	if n != 7 {
		t.Errorf("%d spans in the request's trace, want 7 (request, 2 publish, 2 process, 2 apply)", n)
	}

	// The untraced event: no trace headers, and root spans downstream.
	a := f.applied(untraced[0])
	if _, ok := a.headers["traceparent"]; ok {
		t.Errorf("untraced event has a traceparent header: %v", a.headers)
	}
	if p := publish[untraced[0]]; p == nil || p.Parent().IsValid() || p.SpanContext().TraceID() == tid {
		t.Errorf("untraced event: publish span %v, want a root span of another trace", p)
	}
	if c := process[untraced[0]]; c == nil || c.Parent().IsValid() || c.SpanContext().TraceID() == tid {
		t.Errorf("untraced event: consumer span %v, want a root span of another trace", c)
	}
}

// TestTraceBatchHandler: a BatchHandler's span is the root of a trace of
// its own (a batch has many parents) and links to each event's producer
// span; the handler's spans hang under it.
func TestTraceBatchHandler(t *testing.T) {
	f := start(t, true)
	req, ids := f.produce(t, true, "o-1", "o-2")
	_, untraced := f.produce(t, false, "o-3")
	f.wait(t, 3)

	linked := map[string]bool{}
	batches := f.consumer.named("process ")
	for _, b := range batches {
		if b.Parent().IsValid() || b.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("batch span parent %v kind %v, want a consumer root span", b.Parent(), b.SpanKind())
		}
		for _, l := range b.Links() {
			if l.SpanContext.TraceID() != req.TraceID() || l.SpanContext.SpanID() != req.SpanID() {
				t.Errorf("batch span link to %v, want the request span", l.SpanContext)
			}
			for _, kv := range l.Attributes {
				if kv.Key == "messaging.message.id" {
					linked[kv.Value.AsString()] = true
				}
			}
		}
	}
	for _, id := range ids {
		if !linked[id] {
			t.Errorf("event %s: no batch span links to its producer", id)
		}
	}
	if linked[untraced[0]] {
		t.Errorf("the untraced event %s has a link", untraced[0])
	}
	for _, id := range append(ids, untraced...) {
		a := f.applied(id)
		ok := false
		for _, b := range batches {
			if a.parent.Equal(b.SpanContext()) && a.span.TraceID() == b.SpanContext().TraceID() {
				ok = true
			}
		}
		if !ok {
			t.Errorf("event %s: the handler ran under %v, not a batch span", id, a.parent)
		}
	}
	// The relay's spans are in the producer's trace as with a Handler.
	for _, p := range f.relay.named("publish ") {
		id := attr(p, "messaging.message.id").AsString()
		if id != untraced[0] && (p.SpanContext().TraceID() != req.TraceID() || p.Parent().SpanID() != req.SpanID()) {
			t.Errorf("event %s: publish span not a child of the request span", id)
		}
	}
}
