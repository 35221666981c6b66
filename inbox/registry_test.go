package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/testutil/fakeregistry"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// These tests take records of the registry formats, encoded as the relay
// encodes them (record.ParseSchema, EncodeRegistered), through the
// consumer's decode step (DecodeFormat, then schemaValue) against an
// in-process registry: no Kafka, no PostgreSQL.

const (
	regAvro = `{"type":"record","name":"OrderPlaced","namespace":"shop.v1","fields":[` +
		`{"name":"id","type":"string"},{"name":"qty","type":"int"},{"name":"note","type":["null","string"],"default":null}]}`
	regProto = `syntax = "proto3"; package shop.v1; message Other { string x = 1; } message OrderPlaced { string id = 1; int32 qty = 2; string note = 3; }`
	regJSON  = `{"type":"object","required":["id","qty"],"properties":{"id":{"type":"string"},"qty":{"type":"integer"}}}`
)

// regRig is a fake registry with one schema per registry format and a
// consumer configured to decode with it.
type regRig struct {
	f   *fakeregistry.Registry
	url string
	ids map[record.Format]int
}

func newRegRig(t *testing.T) *regRig {
	f := fakeregistry.New()
	r := &regRig{f: f, ids: map[record.Format]int{
		record.FormatAvro:       f.Register("orders-value", fakeregistry.Schema{Text: regAvro}),
		record.FormatProtobuf:   f.Register("shop.v1.OrderPlaced", fakeregistry.Schema{Type: "PROTOBUF", Text: regProto}),
		record.FormatJSONSchema: f.Register("orders-shop.v1.OrderPlaced", fakeregistry.Schema{Type: "JSON", Text: regJSON}),
	}}
	r.url = f.Serve(t).URL
	return r
}

// consumer is a Consumer reading format with the rig's registry.
func (r *regRig) consumer(t *testing.T, format record.Format, mod func(*SchemaConfig), opts ...Option) *Consumer {
	t.Helper()
	cfg := validConfig()
	cfg.RecordFormat = format
	cfg.BackoffBase, cfg.BackoffMax = time.Millisecond, 5*time.Millisecond
	cfg.Schemas = SchemaConfig{Registry: record.RegistryConfig{URL: r.url}}
	if mod != nil {
		mod(&cfg.Schemas)
	}
	c, err := New(cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// encode is the relay's record of payload in format, with the schema the
// registry holds for it; strategy names the subject (Protobuf's record
// strategy also picks the message by event_type).
func (r *regRig) encode(t *testing.T, format record.Format, strategy record.SubjectStrategy, payload string, offset int64) kafka.Message {
	t.Helper()
	text, typ := map[record.Format][2]string{
		record.FormatAvro: {regAvro, ""}, record.FormatProtobuf: {regProto, "PROTOBUF"}, record.FormatJSONSchema: {regJSON, "JSON"},
	}[format][0], format.SchemaType()
	s, err := record.ParseSchema(context.Background(), uint32(r.ids[format]), typ, text, nil)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := record.NewEncoder(record.Config{Format: format, SubjectStrategy: strategy})
	if err != nil {
		t.Fatal(err)
	}
	row := &record.Row{EventID: "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "1",
		EventType: "shop.v1.OrderPlaced", SchemaVersion: "1", Payload: []byte(payload), CommitTime: time.Unix(1765110600, 0),
		Headers: []byte(`{"tenant":"acme"}`)}
	m, err := enc.EncodeRegistered("orders", row, record.SchemaRef{Subject: "s", Version: "1"}, s)
	if err != nil {
		t.Fatal(err)
	}
	m.Offset = offset
	return m
}

// decode is the consumer's decode step for one record.
func decode(ctx context.Context, c *Consumer, m kafka.Message) (record.Event, error) {
	ev, err := record.DecodeFormat(m, c.cfg.RecordFormat)
	if err != nil {
		return ev, err
	}
	return ev, c.schemaValue(ctx, &ev)
}

func sameJSON(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Errorf("not JSON: %q: %v", got, err)
		return false
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(g, w)
}

// TestRegistryPayloadJSON: each registry format's value reaches the
// handler as the payload the relay encoded, as JSON, with its schema id
// and the subject the strategy names; given the format or detected.
func TestRegistryPayloadJSON(t *testing.T) {
	r := newRegRig(t)
	ctx := t.Context()
	for _, c := range []struct {
		format   record.Format
		strategy record.SubjectStrategy
		payload  string
		want     string // the payload as the schema gives it back
		subject  string
	}{
		{record.FormatAvro, "", `{"qty":2,"id":"o-1","note":{"string":"gift"}}`, `{"id":"o-1","qty":2,"note":"gift"}`, "orders-value"}, // unions come back bare
		{record.FormatAvro, "", `{"qty":2,"id":"o-1","note":"gift"}`, `{"id":"o-1","qty":2,"note":"gift"}`, "orders-value"},
		{record.FormatAvro, "", `{"qty":2,"id":"o-1"}`, `{"id":"o-1","qty":2,"note":null}`, "orders-value"}, // defaults filled in
		{record.FormatProtobuf, record.SubjectRecord, `{"id":"o-1","qty":2,"note":"gift"}`, `{"id":"o-1","qty":2,"note":"gift"}`, "shop.v1.OrderPlaced"},
		{record.FormatJSONSchema, record.SubjectTopicRecord, `{"qty":2,"id":"o-1"}`, `{"qty":2,"id":"o-1"}`, "orders-shop.v1.OrderPlaced"},
	} {
		m := r.encode(t, c.format, c.strategy, c.payload, 3)
		for _, f := range []record.Format{c.format, ""} {
			cons := r.consumer(t, f, func(s *SchemaConfig) { s.SubjectStrategy = c.strategy })
			ev, err := decode(ctx, cons, m)
			if err != nil {
				t.Fatalf("%s (%q): %v", c.format, f, err)
			}
			if !sameJSON(t, ev.Payload, c.want) {
				t.Errorf("%s (%q): payload %s, want %s", c.format, f, ev.Payload, c.want)
			}
			if ev.SchemaID != uint32(r.ids[c.format]) || ev.Subject != c.subject || ev.Headers["tenant"] != "acme" || ev.AggregateID != "o-1" {
				t.Errorf("%s (%q): schema id %d subject %q headers %v", c.format, f, ev.SchemaID, ev.Subject, ev.Headers)
			}
		}
	}
}

// TestRegistryPayloadRaw: with PayloadAs raw the handler gets the framed
// value unchanged, with its schema id and subject, and the registry is
// never asked (nor needed).
func TestRegistryPayloadRaw(t *testing.T) {
	r := newRegRig(t)
	m := r.encode(t, record.FormatProtobuf, record.SubjectRecord, `{"id":"o-1","qty":2}`, 0)
	for _, url := range []string{r.url, ""} {
		c := r.consumer(t, record.FormatProtobuf, func(s *SchemaConfig) {
			s.PayloadAs, s.Registry.URL, s.SubjectStrategy = PayloadRaw, url, record.SubjectRecord
		})
		ev, err := decode(t.Context(), c, m)
		if err != nil || string(ev.Payload) != string(m.Value) || ev.SchemaID != uint32(r.ids[record.FormatProtobuf]) || ev.Subject != "shop.v1.OrderPlaced" {
			t.Fatalf("raw (registry %q): %+v, %v", url, ev, err)
		}
	}
	if n := r.f.Requests(); n != 0 {
		t.Errorf("%d registry requests in raw mode", n)
	}
	// Without a registry the native format passes framed values as they are.
	c, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	ev, err := decode(t.Context(), c, m)
	if err != nil || string(ev.Payload) != string(m.Value) || ev.SchemaID == 0 || ev.Subject != "orders-value" || ev.Format != record.FormatNative {
		t.Fatalf("native without a registry: %+v, %v", ev, err)
	}
}

// TestRegistryPermanent: a schema id the registry does not have, and a
// body its schema does not decode, are DecodeErrors (the inbox
// dead-letters them) that keep the framed value; not a registry error.
func TestRegistryPermanent(t *testing.T) {
	r := newRegRig(t)
	c := r.consumer(t, record.FormatAvro, nil)
	unknown := r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, 0)
	unknown.Value[4] = 99 // schema id 99
	corrupt := r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, 1)
	corrupt.Value = append(corrupt.Value[:5], 0x7f) // a string length past the end
	for name, m := range map[string]kafka.Message{"unknown id": unknown, "corrupt body": corrupt} {
		ev, err := decode(t.Context(), c, m)
		var de *record.DecodeError
		var re *registryError
		if !errors.As(err, &de) || !isDecodeError(err) || errors.As(err, &re) || de.Offset != m.Offset {
			t.Fatalf("%s: %v, want a *record.DecodeError", name, err)
		}
		if string(ev.Payload) != string(m.Value) || ev.ID == "" || !strings.Contains(err.Error(), "subject orders-value") {
			t.Errorf("%s: %v; event %+v", name, err, ev)
		}
		if name == "unknown id" && !errors.Is(err, record.ErrSchemaNotFound) {
			t.Errorf("unknown id: %v, want ErrSchemaNotFound", err)
		}
	}
}

// TestRegistryTransient: a registry that does not answer is a
// registryError, not a DecodeError: awaitSchema retries it until the
// registry answers, or returns ctx's error when the consumer stops.
func TestRegistryTransient(t *testing.T) {
	r := newRegRig(t)
	c := r.consumer(t, record.FormatAvro, nil)
	m := r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, 0)
	r.f.SetDown(true)
	ev, err := decode(t.Context(), c, m)
	var re *registryError
	if !errors.As(err, &re) || isDecodeError(err) || string(ev.Payload) != string(m.Value) {
		t.Fatalf("registry down: %v, want a registryError", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- c.awaitSchema(ctx, &ev, err) }()
	cancel()
	if err := <-stopped; !errors.Is(err, context.Canceled) {
		t.Fatalf("awaitSchema after the stop: %v", err)
	}

	done := make(chan error, 1)
	go func() { done <- c.awaitSchema(t.Context(), &ev, err) }()
	for r.f.Requests() < 3 { // retrying, with backoff
		select {
		case err := <-done:
			t.Fatalf("awaitSchema returned while the registry is down: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	r.f.SetDown(false)
	if err := <-done; err != nil || !sameJSON(t, ev.Payload, `{"id":"o-1","qty":2,"note":null}`) {
		t.Fatalf("after the registry came back: %v, payload %s", err, ev.Payload)
	}
	if c.Stats().Retries < 2 {
		t.Errorf("retries %d", c.Stats().Retries)
	}
}

// TestRegistryOneRequest: many records of one schema cost one registry
// request, whatever their number.
func TestRegistryOneRequest(t *testing.T) {
	r := newRegRig(t)
	c := r.consumer(t, record.FormatAvro, nil)
	for i := range 200 {
		if _, err := decode(t.Context(), c, r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.f.Requests(); n != 1 {
		t.Errorf("%d registry requests for 200 records of one schema, want 1", n)
	}
}

// regMetrics records what a consumer reports of its registry client
// (RegistryMetrics), beside a Metrics that measures nothing else.
type regMetrics struct {
	nopMetrics
	mu       sync.Mutex
	requests []string       // consumer op outcome, in order
	lookups  map[string]int // consumer op hit|miss -> count
}

func (m *regMetrics) RegistryRequest(consumer, op, outcome string, took time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests = append(m.requests, consumer+" "+op+" "+outcome)
}

func (m *regMetrics) RegistryCacheLookup(consumer, op string, hit bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	result := "miss"
	if hit {
		result = "hit"
	}
	if m.lookups == nil {
		m.lookups = map[string]int{}
	}
	m.lookups[consumer+" "+op+" "+result]++
}

// take returns what was recorded and forgets it.
func (m *regMetrics) take() ([]string, map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, l := m.requests, m.lookups
	m.requests, m.lookups = nil, nil
	return r, l
}

// TestRegistryMetrics: a Metrics that implements RegistryMetrics is told
// of the consumer's registry requests (by op and outcome, the error's
// reason) and of its cache's hits and misses, under the consumer's name
// (issue 48: "registry requests, cache hits and misses, errors by
// reason").
func TestRegistryMetrics(t *testing.T) {
	r := newRegRig(t)
	m := &regMetrics{}
	c := r.consumer(t, record.FormatAvro, nil, WithMetrics(m))
	rec := r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, 0)
	for range 3 {
		if _, err := decode(t.Context(), c, rec); err != nil {
			t.Fatal(err)
		}
	}
	reqs, lookups := m.take()
	if want := []string{"shipping schema_by_id ok"}; !reflect.DeepEqual(reqs, want) {
		t.Errorf("requests %q, want %q", reqs, want)
	}
	if want := map[string]int{"shipping schema_by_id miss": 1, "shipping schema_by_id hit": 2}; !reflect.DeepEqual(lookups, want) {
		t.Errorf("cache lookups %v, want %v", lookups, want)
	}

	unknown := r.encode(t, record.FormatAvro, "", `{"id":"o-1","qty":2}`, 1)
	unknown.Value[4] = 99 // schema id 99
	if _, err := decode(t.Context(), c, unknown); !errors.Is(err, record.ErrSchemaNotFound) {
		t.Fatalf("unknown id: %v", err)
	}
	if reqs, _ := m.take(); !reflect.DeepEqual(reqs, []string{"shipping schema_by_id not_found"}) {
		t.Errorf("unknown id: requests %q", reqs)
	}

	r.f.SetDown(true)
	other := r.consumer(t, record.FormatAvro, nil, WithMetrics(m))
	if _, err := decode(t.Context(), other, rec); err == nil {
		t.Fatal("registry down: decoded")
	}
	if reqs, _ := m.take(); !reflect.DeepEqual(reqs, []string{"shipping schema_by_id transient"}) {
		t.Errorf("registry down: requests %q", reqs)
	}
}

// TestSchemasConfig: a registry format decoded to JSON needs the
// registry; raw does not; the settings are checked and named by field.
func TestSchemasConfig(t *testing.T) {
	c, err := New(validConfig())
	if err != nil || c.cfg.Schemas.PayloadAs != PayloadJSON || c.cfg.Schemas.SubjectStrategy != record.SubjectTopic || c.reg != nil {
		t.Fatalf("defaults: %+v, %v", c.cfg.Schemas, err)
	}
	fields := func(mod func(*Config)) []string {
		cfg := validConfig()
		mod(&cfg)
		err := cfg.Validate()
		if err == nil {
			return nil
		}
		var out []string
		for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
			var fe *FieldError
			if !errors.As(e, &fe) {
				t.Fatalf("%v is not a *FieldError", e)
			}
			out = append(out, fe.Field)
		}
		return out
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want []string
	}{
		{func(c *Config) { c.RecordFormat = record.FormatAvro }, []string{"Schemas.Registry.URL"}},
		{func(c *Config) { c.RecordFormat, c.Schemas.PayloadAs = record.FormatProtobuf, PayloadRaw }, nil},
		{func(c *Config) {
			c.RecordFormat, c.Schemas.Registry.URL = record.FormatJSONSchema, "http://127.0.0.1:1"
		}, nil},
		{func(c *Config) { c.Schemas.PayloadAs, c.Schemas.SubjectStrategy = "bytes", "by-name" }, []string{"Schemas.PayloadAs", "Schemas.SubjectStrategy"}},
		{func(c *Config) { c.Schemas.Registry = record.RegistryConfig{URL: "ftp://x", Token: "t", Username: "u"} }, []string{"Schemas.Registry.URL", "Schemas.Registry.Token"}},
	} {
		if got := fields(tc.mod); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("fields %v, want %v", got, tc.want)
		}
	}
	cfg := validConfig()
	cfg.RecordFormat = record.FormatAvro
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "Schemas.Registry.URL: is required with RecordFormat avro") {
		t.Fatalf("New: %v", err)
	}
	if _, err := ParsePayloadAs("raw"); err != nil {
		t.Fatal(err)
	}
}

// TestBatchSchemaRegistry: applyRecords with the registry (PostgreSQL
// from the stack; skipped without it). A record whose schema id the
// registry does not have is dead-lettered under its own event id and its
// aggregate waits; the others reach the handler decoded. A registry that
// does not answer holds the partition at the record it cannot decode:
// the events before it are applied, nothing is dead-lettered, and the
// batch finishes once the registry answers.
func TestBatchSchemaRegistry(t *testing.T) {
	r := newBatchRig(t)
	f := fakeregistry.New()
	id1 := f.Register("t-value", fakeregistry.Schema{Text: `{"type":"record","name":"E","fields":[]}`})
	id2 := f.Register("t-value", fakeregistry.Schema{Text: `{"type":"record","name":"E","doc":"v2","fields":[]}`})
	url := f.Serve(t).URL
	frame := func(id int) []byte { return []byte{0, 0, 0, 0, byte(id)} } // an empty record's body is empty
	c := r.consumer(func(cfg *Config) {
		cfg.RecordFormat, cfg.Schemas.Registry.URL = record.FormatAvro, url
		cfg.Handler = func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
			if string(ev.Payload) != "{}" || ev.SchemaID == 0 || ev.Subject != "t-value" {
				return poison.Permanent(fmt.Errorf("payload %q schema id %d subject %q", ev.Payload, ev.SchemaID, ev.Subject))
			}
			return r.applyOne(ctx, tx, ev)
		}
	})
	msgs, ids := script()
	for i := range msgs {
		msgs[i].Value = frame(id1)
	}
	msgs[4].Value = frame(99) // b2
	done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs)
	if err != nil || done != len(msgs) {
		t.Fatalf("applyRecords = %d, %v", done, err)
	}
	if r.version("a") != 4 || r.version("b") != 1 || r.version("c") != 4 {
		t.Fatalf("a=%d b=%d c=%d", r.version("a"), r.version("b"), r.version("c"))
	}
	dls, err := c.DeadLetters(r.s.Ctx, false, 0)
	if err != nil || len(dls) != 3 || dls[0].ID != ids["b2"] || dls[0].Status != "dead" || !strings.Contains(dls[0].Reason, "schema id 99") || dls[0].SchemaID != 99 {
		t.Fatalf("dead letters %+v, %v", dls, err)
	}
	if n := f.Requests(); n != 2 {
		t.Errorf("%d registry requests, want 2 (id %d, id 99)", n, id1)
	}

	more := []kafka.Message{rec(uuid.NewString(), "d", 1, 20), rec(uuid.NewString(), "d", 2, 21)}
	more[0].Value, more[1].Value = frame(id1), frame(id2) // id2 is not cached yet
	f.SetDown(true)
	result := make(chan error, 1)
	go func() {
		n, err := c.applyRecords(r.s.Ctx, r.s.Ctx, more)
		if err == nil && n != 2 {
			err = fmt.Errorf("%d records done", n)
		}
		result <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); r.version("d") != 1 || f.Requests() < 4; {
		if time.Now().After(deadline) {
			t.Fatalf("d=%d after %d requests: d1 not applied while the registry is down", r.version("d"), f.Requests())
		}
		select {
		case err := <-result:
			t.Fatalf("applyRecords returned while the registry is down: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	f.SetDown(false)
	if err := <-result; err != nil {
		t.Fatal(err)
	}
	if r.version("d") != 2 || c.Stats().DeadLettered != 1 {
		t.Fatalf("d=%d, dead-lettered %d", r.version("d"), c.Stats().DeadLettered)
	}
}
