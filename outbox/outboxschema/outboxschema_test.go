package outboxschema_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/internal/testutil/fakeregistry"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxschema"
	"github.com/outbox-relay/outbox-relay/record"
)

// recorder is an outbox.Tx that records the statements a Writer sends
// instead of running them, and answers a Transition's change with rows
// and returned.
type recorder struct {
	calls    []call
	changes  []call
	rows     int64
	returned []int64
}

type call struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) error {
	r.calls = append(r.calls, call{sql: sql, args: args})
	return nil
}

func (r *recorder) Change(_ context.Context, sql string, args ...any) (int64, []int64, error) {
	r.changes = append(r.changes, call{sql: sql, args: args})
	return r.rows, r.returned, nil
}

// nopExecer accepts every statement: the benchmark measures the Writer
// and the check, not a fake's bookkeeping.
type nopExecer struct{}

func (nopExecer) Exec(context.Context, string, ...any) error { return nil }

var testTable = migrations.Table{Schema: "public", Name: "outbox"}

func validEvent() *outbox.Event {
	return &outbox.Event{
		AggregateType:    "order",
		AggregateID:      "o-1",
		AggregateVersion: 2,
		EventType:        "order.confirmed",
		SchemaVersion:    1,
		Payload:          []byte(`{"id":"o-1"}`),
		Headers:          map[string]string{"trace_id": "abc"},
	}
}

// newFakeRegistry is a fake registry served on a loopback socket for
// the test.
func newFakeRegistry(t testing.TB) (*fakeregistry.Registry, *httptest.Server) {
	f := fakeregistry.New()
	return f, f.Serve(t)
}

const (
	avroOrder  = `{"type":"record","name":"OrderConfirmed","namespace":"shop.v1","fields":[{"name":"id","type":"string"},{"name":"qty","type":"int"}]}`
	protoOrder = `syntax = "proto3"; package shop.v1; message OrderPlaced { string id = 1; } message OrderConfirmed { string id = 1; int32 qty = 2; }`
	jsonOrder  = `{"type":"object","required":["id","qty"],"properties":{"id":{"type":"string"},"qty":{"type":"integer"}}}`
)

// checkedWriter is a Writer with the schema check against srv, the topic
// outbox.event.order (the default template), subject
// outbox.event.order-value by default.
func checkedWriter(t testing.TB, srv *httptest.Server, rc record.Config, opts ...outbox.Option) *outbox.Writer {
	t.Helper()
	rc.Registry.URL = srv.URL
	c, err := outboxschema.New(outboxschema.Config{Record: rc})
	if err != nil {
		t.Fatal(err)
	}
	return outbox.NewWriter(testTable, append(opts, outbox.WithEventCheck(c))...)
}

func orderEvent(payload string) *outbox.Event {
	e := validEvent()
	e.Payload = []byte(payload)
	return e
}

func TestSchemaCheckPassesAMatchingPayload(t *testing.T) {
	for _, c := range []struct {
		format   record.Format
		typ      string
		text     string
		strategy record.SubjectStrategy
		subject  string
	}{
		{record.FormatAvro, "", avroOrder, "", "outbox.event.order-value"},
		{record.FormatProtobuf, record.SchemaTypeProtobuf, protoOrder, record.SubjectRecord, "order.confirmed"},
		{record.FormatJSONSchema, record.SchemaTypeJSON, jsonOrder, record.SubjectTopicRecord, "outbox.event.order-order.confirmed"},
	} {
		t.Run(string(c.format), func(t *testing.T) {
			f, srv := newFakeRegistry(t)
			f.Register(c.subject, fakeregistry.Schema{Type: c.typ, Text: c.text})
			w := checkedWriter(t, srv, record.Config{Format: c.format, SubjectStrategy: c.strategy})
			e := orderEvent(`{"id":"o-1","qty":2}`)
			if c.format == record.FormatProtobuf {
				e.EventType = "OrderConfirmed" // the message, by the record strategy
				f.Register("OrderConfirmed", fakeregistry.Schema{Type: c.typ, Text: c.text})
			}
			r := &recorder{}
			if err := w.Append(context.Background(), r, e); err != nil {
				t.Fatal(err)
			}
			if len(r.calls) != 1 || r.calls[0].args[6] != `{"id":"o-1","qty":2}` {
				t.Fatalf("calls = %+v, want the INSERT of the payload as given", r.calls)
			}
		})
	}
}

func TestSchemaCheckRefusesAMismatchBeforeTheInsert(t *testing.T) {
	f, srv := newFakeRegistry(t)
	id := f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro})
	r := &recorder{}
	e := orderEvent(`{"id":"o-1","qty":"two"}`)
	err := w.Append(context.Background(), r, e)
	var se *outboxschema.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, outbox.ErrInvalidEvent) || errors.Is(err, outboxschema.ErrUnavailable) {
		t.Fatalf("err = %v, want a *SchemaError wrapping outbox.ErrInvalidEvent", err)
	}
	if se.Field != "qty" || se.Subject != "outbox.event.order-value" || se.Version != "1" || se.SchemaID != uint32(id) ||
		se.Topic != "outbox.event.order" || se.EventType != "order.confirmed" || se.Unavailable {
		t.Fatalf("SchemaError = %+v", se)
	}
	want := "invalid outbox event (order.confirmed): schema check: subject outbox.event.order-value version 1 (schema id 1): field qty: "
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("err = %q, want it to start %q", err, want)
	}
	if len(r.calls) != 0 {
		t.Fatalf("the INSERT ran: %+v", r.calls)
	}
	if e.EventID != uuid.Nil {
		t.Fatal("a refused event was given an EventID")
	}

	// Protobuf: the message picked by the record strategy, the member
	// named in the reason.
	f.Register("shop.v1.OrderConfirmed", fakeregistry.Schema{Type: record.SchemaTypeProtobuf, Text: protoOrder})
	w = checkedWriter(t, srv, record.Config{Format: record.FormatProtobuf, SubjectStrategy: record.SubjectRecord})
	e = orderEvent(`{"id":"o-1","qty":2}`)
	e.EventType = "shop.v1.OrderPlaced" // its own subject is not registered
	if err := w.Append(context.Background(), r, e); !errors.Is(err, record.ErrSchemaNotFound) {
		t.Fatalf("unregistered subject: %v", err)
	}
	e.EventType = "shop.v1.OrderConfirmed"
	e.Payload = []byte(`{"id":"o-1","qty":2,"extra":1}`)
	err = w.Append(context.Background(), r, e)
	if !errors.As(err, &se) || !strings.Contains(se.Reason, `"extra"`) || len(r.calls) != 0 {
		t.Fatalf("protobuf: err = %v, %d calls; want the unknown member named and no INSERT", err, len(r.calls))
	}
}

func TestSchemaCheckRefusesAnUnregisteredVersion(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro})
	r := &recorder{}
	e := orderEvent(`{"id":"o-1","qty":2}`)
	e.SchemaVersion = 2
	err := w.Append(context.Background(), r, e)
	var se *outboxschema.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, outbox.ErrInvalidEvent) || !errors.Is(err, record.ErrSchemaNotFound) {
		t.Fatalf("err = %v, want a *SchemaError wrapping outbox.ErrInvalidEvent and record.ErrSchemaNotFound", err)
	}
	if se.Subject != "outbox.event.order-value" || se.Version != "2" || !strings.Contains(se.Reason, "not registered") {
		t.Fatalf("SchemaError = %+v", se)
	}
	if len(r.calls) != 0 {
		t.Fatal("the INSERT ran")
	}
}

func TestSchemaCheckRefusesWhileTheRegistryIsDown(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	f.SetDown(true)
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro})
	r := &recorder{}
	err := w.Append(context.Background(), r, orderEvent(`{"id":"o-1","qty":2}`))
	var se *outboxschema.SchemaError
	if !errors.As(err, &se) || !se.Unavailable || !errors.Is(err, outboxschema.ErrUnavailable) || errors.Is(err, outbox.ErrInvalidEvent) {
		t.Fatalf("err = %v, want a *SchemaError wrapping outboxschema.ErrUnavailable and not outbox.ErrInvalidEvent", err)
	}
	if !strings.HasPrefix(err.Error(), "schema registry unavailable (order.confirmed): schema check: subject outbox.event.order-value version 1: ") {
		t.Fatalf("err = %q", err)
	}
	if len(r.calls) != 0 {
		t.Fatal("the INSERT ran")
	}

	// Unreachable altogether: the same class.
	srv.Close()
	if err := w.Append(context.Background(), r, orderEvent(`{"id":"o-1","qty":2}`)); !errors.Is(err, outboxschema.ErrUnavailable) || len(r.calls) != 0 {
		t.Fatalf("closed registry: %v, %d calls", err, len(r.calls))
	}
}

func TestSchemaCheckAsksTheRegistryOncePerSchema(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro})
	r := &recorder{}
	ctx := context.Background()
	if err := w.Append(ctx, r, orderEvent(`{"id":"o-1","qty":2}`)); err != nil {
		t.Fatal(err)
	}
	first := f.Requests()
	if first != 1 {
		t.Fatalf("the first Append made %d requests, want 1", first)
	}
	for range 10 {
		if err := w.Append(ctx, r, orderEvent(`{"id":"o-2","qty":3}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Append(ctx, r, orderEvent(`{"id":"o-2"}`)); !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Fatalf("a mismatch against the cached schema: %v", err)
	}
	if n := f.Requests(); n != first {
		t.Fatalf("later Appends made %d requests, want none", n-first)
	}
	// The cache keeps answering while the registry is down.
	f.SetDown(true)
	if err := w.Append(ctx, r, orderEvent(`{"id":"o-3","qty":4}`)); err != nil || f.Requests() != first {
		t.Fatalf("registry down, schema cached: %v after %d requests", err, f.Requests()-first)
	}
	if len(r.calls) != 12 {
		t.Fatalf("%d INSERTs, want 12", len(r.calls))
	}
}

func TestSchemaCheckLatestIsRefreshedAfterItsTTL(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	ctx := context.Background()
	r := &recorder{}
	for _, c := range []struct {
		ttl  time.Duration
		want int // requests of the second Append
	}{{0, 0}, {time.Nanosecond, 1}} { // 0: the default, a minute
		w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro, SchemaVersion: record.VersionLatest,
			Registry: record.RegistryConfig{LatestTTL: c.ttl}})
		if err := w.Append(ctx, r, orderEvent(`{"id":"o-1","qty":2}`)); err != nil {
			t.Fatal(err)
		}
		before := f.Requests()
		if err := w.Append(ctx, r, orderEvent(`{"id":"o-1","qty":2}`)); err != nil {
			t.Fatal(err)
		}
		if n := f.Requests() - before; n != c.want {
			t.Errorf("LatestTTL %v: the second Append made %d requests, want %d", c.ttl, n, c.want)
		}
	}
}

// framed is payload's body in the Confluent wire format with schema id.
func framed(id int, body ...byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), body...)
}

func TestSchemaCheckFramedPayloadIsCheckedByItsID(t *testing.T) {
	f, srv := newFakeRegistry(t)
	id := f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	other := f.Register("payments-value", fakeregistry.Schema{Text: `"string"`})
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro}, outbox.WithBinaryPayload())
	r := &recorder{}
	ctx := context.Background()
	e := validEvent()
	e.Payload = framed(id, 0x06, 'o', '-', '1', 0x04) // not decoded: the relay passes it unchanged
	if err := w.Append(ctx, r, e); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 1 || string(r.calls[0].args[6].([]byte)) != string(e.Payload) {
		t.Fatalf("calls = %+v, want the framed payload inserted as it is", r.calls)
	}
	if !slices.Contains(f.Paths(), "/schemas/ids/"+strconv.Itoa(id)+"/versions") {
		t.Fatalf("requests %v: the framed id was not looked up", f.Paths())
	}

	e = validEvent()
	e.Payload = framed(other, 0x02, 'x')
	err := w.Append(ctx, r, e)
	var se *outboxschema.SchemaError
	if !errors.As(err, &se) || !errors.Is(err, outbox.ErrInvalidEvent) || !errors.Is(err, record.ErrSchemaNotFound) || se.SchemaID != uint32(other) {
		t.Fatalf("framed with another subject's id: %v", err)
	}
	if !strings.Contains(se.Reason, "not a version of subject outbox.event.order-value") || len(r.calls) != 1 {
		t.Fatalf("reason %q, %d calls", se.Reason, len(r.calls))
	}
	e.Payload = framed(99)
	if err := w.Append(ctx, r, e); !errors.Is(err, record.ErrSchemaNotFound) || len(r.calls) != 1 {
		t.Fatalf("framed with an unknown id: %v, %d calls", err, len(r.calls))
	}
}

func TestSchemaCheckTopicTemplateNamesTheSubject(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("shop.order.order.confirmed-value", fakeregistry.Schema{Text: avroOrder})
	c, err := outboxschema.New(outboxschema.Config{Record: record.Config{Format: record.FormatAvro, Registry: record.RegistryConfig{URL: srv.URL}},
		TopicTemplate: "shop.{aggregate_type}.{event_type}"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Check(context.Background(), orderEvent(`{"id":"o-1","qty":2}`)); err != nil {
		t.Fatal(err)
	}
	e := orderEvent(`{"id":"o-1","qty":2}`)
	e.AggregateType = "a b"
	var ve *outbox.ValidationError
	if err := c.Check(context.Background(), e); !errors.As(err, &ve) || !strings.Contains(err.Error(), `invalid Kafka topic name "shop.a b.order.confirmed"`) {
		t.Fatalf("a topic Kafka refuses: %v", err)
	}
}

func TestSchemaCheckBatchAndTransition(t *testing.T) {
	f, srv := newFakeRegistry(t)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	w := checkedWriter(t, srv, record.Config{Format: record.FormatAvro})
	ctx := context.Background()
	r := &recorder{}
	events := []*outbox.Event{orderEvent(`{"id":"o-1","qty":2}`), orderEvent(`{"id":"o-2","qty":2.5}`)}
	err := w.AppendBatch(ctx, r, events)
	var se *outboxschema.SchemaError
	if !errors.As(err, &se) || se.Field != "qty" || !strings.HasPrefix(err.Error(), "event 1 of 2: ") {
		t.Fatalf("batch: %v", err)
	}
	if len(r.calls) != 0 || events[0].EventID != uuid.Nil {
		t.Fatal("a batch with a refused event was partly processed")
	}
	events[1].Payload = []byte(`{"id":"o-2","qty":3}`)
	if err := w.AppendBatch(ctx, r, events); err != nil || len(r.calls) != 1 {
		t.Fatalf("batch: %v, %d calls", err, len(r.calls))
	}

	tx := &recorder{rows: 1, returned: []int64{7}}
	e := validEvent()
	e.AggregateVersion = 0
	tr := outbox.Transition{SQL: `UPDATE orders SET status = 'confirmed', version = version + 1 WHERE id = $1 AND status = 'pending' RETURNING version`,
		Args: []any{"o-1"}, Event: e}
	tr.Event.Payload = []byte(`{"id":"o-1"}`)
	if err := w.Transition(ctx, tx, tr); !errors.As(err, &se) || len(tx.changes) != 0 || len(tx.calls) != 0 {
		t.Fatalf("transition: %v, %d changes, %d inserts; want refused before the change", err, len(tx.changes), len(tx.calls))
	}
	tr.Event.Payload = []byte(`{"id":"o-1","qty":1}`)
	if err := w.Transition(ctx, tx, tr); err != nil || len(tx.changes) != 1 || len(tx.calls) != 1 || tr.Event.AggregateVersion != 7 {
		t.Fatalf("transition: %v, %d changes, %d inserts", err, len(tx.changes), len(tx.calls))
	}
}

func TestNewRefusesWhatTheRelayWouldNotRun(t *testing.T) {
	for _, c := range []struct {
		cfg  outboxschema.Config
		want string
	}{
		{outboxschema.Config{Record: record.Config{Format: record.FormatNative, Registry: record.RegistryConfig{URL: "http://r:8081"}}}, "Record.Format"},
		{outboxschema.Config{Record: record.Config{Format: record.FormatAvro}}, "Record.Registry"},
		{outboxschema.Config{Record: record.Config{Format: record.FormatAvro, Registry: record.RegistryConfig{URL: "http://r:8081"}}, TopicTemplate: "{nope}"}, "TopicTemplate"},
		{outboxschema.Config{Record: record.Config{Format: record.FormatAvro, SubjectStrategy: "x", Registry: record.RegistryConfig{URL: "http://r:8081"}}}, "subject strategy"},
	} {
		_, err := outboxschema.New(c.cfg)
		var fe *outbox.FieldError
		if !errors.As(err, &fe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a FieldError naming %s", c.cfg, err, c.want)
		}
	}
}

// BenchmarkAppendSchemaCheck is Append without the schema check and with
// it, its schema cached (the steady state: no request), for the three
// registry formats; the difference is the check's cost per event.
//
//	go test -run '^$' -bench BenchmarkAppendSchemaCheck -benchmem ./outbox/outboxschema/
func BenchmarkAppendSchemaCheck(b *testing.B) {
	f, srv := newFakeRegistry(b)
	f.Register("outbox.event.order-value", fakeregistry.Schema{Text: avroOrder})
	f.Register("shop.v1.OrderConfirmed", fakeregistry.Schema{Type: record.SchemaTypeProtobuf, Text: protoOrder})
	f.Register("outbox.event.order-order.confirmed", fakeregistry.Schema{Type: record.SchemaTypeJSON, Text: jsonOrder})
	cases := []struct {
		name      string
		rc        *record.Config // nil: no check
		eventType string
	}{
		{"none", nil, "order.confirmed"},
		{"avro", &record.Config{Format: record.FormatAvro}, "order.confirmed"},
		// The record strategy: the event type names the subject and the message.
		{"protobuf", &record.Config{Format: record.FormatProtobuf, SubjectStrategy: record.SubjectRecord}, "shop.v1.OrderConfirmed"},
		{"json-schema", &record.Config{Format: record.FormatJSONSchema, SubjectStrategy: record.SubjectTopicRecord}, "order.confirmed"},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			w := outbox.NewWriter(testTable)
			if c.rc != nil {
				w = checkedWriter(b, srv, *c.rc)
			}
			ctx := context.Background()
			e := orderEvent(`{"id":"o-1","qty":2}`)
			e.Headers = nil
			e.EventType = c.eventType
			if err := w.Append(ctx, nopExecer{}, e); err != nil { // warms the cache
				b.Fatal(err)
			}
			before := f.Requests()
			b.ReportAllocs()
			for b.Loop() {
				e.EventID = uuid.Nil
				if err := w.Append(ctx, nopExecer{}, e); err != nil {
					b.Fatal(err)
				}
			}
			if n := f.Requests() - before; n != 0 {
				b.Fatalf("%d registry requests while the schema was cached", n)
			}
		})
	}
}

// A nil *Checker checks nothing, as a Writer without a check: an
// interface holding it is not nil, so Check itself must say so.
func TestNilCheckerChecksNothing(t *testing.T) {
	var c *outboxschema.Checker
	w := outbox.NewWriter(testTable, outbox.WithEventCheck(c))
	r := &recorder{}
	if err := w.Append(context.Background(), r, validEvent()); err != nil || len(r.calls) != 1 {
		t.Fatalf("Append = %v, %d INSERTs", err, len(r.calls))
	}
}
