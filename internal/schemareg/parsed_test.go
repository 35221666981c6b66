package schemareg

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/testutil/fakeregistry"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestSchemaParsesAndCaches: a subject's version comes back parsed, and
// the second lookup of it costs no request and no parse.
func TestSchemaParsesAndCaches(t *testing.T) {
	f := fakeregistry.New()
	f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
	id2 := f.Register("orders-value", fakeregistry.Schema{Type: "JSON", Text: `{"type":"object","required":["id"]}`})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	s, err := c.Schema(ctx, record.SchemaRef{Subject: "orders-value", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID != 1 || s.Type != record.SchemaTypeAvro {
		t.Errorf("version 1: id %d type %s, want 1 AVRO", s.ID, s.Type)
	}
	latest, err := c.Schema(ctx, record.SchemaRef{Subject: "orders-value", Version: "latest"})
	if err != nil {
		t.Fatal(err)
	}
	if latest.ID != uint32(id2) || latest.Type != record.SchemaTypeJSON {
		t.Errorf("latest: id %d type %s, want %d JSON", latest.ID, latest.Type, id2)
	}
	before := f.Requests()
	again, err := c.Schema(ctx, record.SchemaRef{Subject: "orders-value", Version: "1"})
	if err != nil || again != s {
		t.Errorf("second lookup: %p, %v; want the cached %p", again, err, s)
	}
	if n := f.Requests() - before; n != 0 {
		t.Errorf("%d requests for a cached schema", n)
	}
}

// TestSchemaPoisonAndTransient: what the publisher does with an event
// depends on the class of the error: not registered and unusable are
// poison, a registry that does not answer is neither.
func TestSchemaPoisonAndTransient(t *testing.T) {
	f := fakeregistry.New()
	f.Register("bad-value", fakeregistry.Schema{Text: `{"type":"record","name":"X","fields":[{"name":"a","type":"nosuchtype"}]}`})
	f.Register("typo-value", fakeregistry.Schema{Type: "XML", Text: `<x/>`})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	for _, tc := range []struct {
		ref  record.SchemaRef
		want error
	}{
		{record.SchemaRef{Subject: "missing-value", Version: "1"}, record.ErrSchemaNotFound},
		{record.SchemaRef{Subject: "bad-value", Version: "2"}, record.ErrSchemaNotFound},
		{record.SchemaRef{Subject: "bad-value", Version: "1"}, record.ErrSchemaInvalid},
		{record.SchemaRef{Subject: "bad-value", Version: "x"}, record.ErrSchemaInvalid},
		{record.SchemaRef{Subject: "typo-value", Version: "1"}, record.ErrSchemaInvalid},
	} {
		_, err := c.Schema(ctx, tc.ref)
		if !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v, want %v", tc.ref, err, tc.want)
		}
	}
	// The failed parse is remembered: the next event of that schema is
	// poison without another parse (counted by the parse's requests: none).
	before := f.Requests()
	if _, err := c.Schema(ctx, record.SchemaRef{Subject: "bad-value", Version: "1"}); !errors.Is(err, record.ErrSchemaInvalid) {
		t.Errorf("again: %v", err)
	}
	if n := f.Requests() - before; n != 0 {
		t.Errorf("%d requests for a schema known to be unusable", n)
	}
	f.SetFail(func(*http.Request) (int, string) { return http.StatusServiceUnavailable, "down" })
	_, err := c.Schema(ctx, record.SchemaRef{Subject: "new-value", Version: "1"})
	if err == nil || errors.Is(err, record.ErrSchemaNotFound) || errors.Is(err, record.ErrSchemaInvalid) || !errors.Is(err, ErrTransient) {
		t.Errorf("registry down: %v, want transient only", err)
	}
}

// TestSchemaResolvesReferences: a Protobuf schema's imports, and theirs,
// are looked up by the names it imports them with.
func TestSchemaResolvesReferences(t *testing.T) {
	f := fakeregistry.New()
	f.Register("money", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; package shop; message Money { int64 cents = 1; }`})
	f.Register("line", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; package shop; import "money.proto"; message Line { Money price = 1; }`,
		Refs: []fakeregistry.Reference{{Name: "money.proto", Subject: "money", Version: 1}}})
	f.Register("orders-value", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; package shop; import "line.proto"; message Order { repeated Line lines = 1; }`,
		Refs: []fakeregistry.Reference{{Name: "line.proto", Subject: "line", Version: 1}}})
	f.Register("dangling-value", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; import "gone.proto"; message D { Gone g = 1; }`,
		Refs: []fakeregistry.Reference{{Name: "gone.proto", Subject: "gone", Version: 1}}})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	s, err := c.Schema(ctx, record.SchemaRef{Subject: "orders-value", Version: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendValue(nil, []byte(`{"lines":[{"price":{"cents":"250"}}]}`), ""); err != nil {
		t.Errorf("encode with the resolved imports: %v", err)
	}
	if _, err := c.Schema(ctx, record.SchemaRef{Subject: "dangling-value", Version: "1"}); !errors.Is(err, record.ErrSchemaNotFound) {
		t.Errorf("a reference the registry does not have: %v, want ErrSchemaNotFound", err)
	}
}

// TestSchemaReferenceBounds: a registry's references cannot make one
// schema cost unbounded lookups: a chain past the depth, a fan-out past
// the count, and one name for two schemas are unusable, a cycle ends.
func TestSchemaReferenceBounds(t *testing.T) {
	f := fakeregistry.New()
	const js = `{"type":"object"}`
	// A chain deeper than maxReferenceDepth: chain-0 -> chain-1 -> ...
	for i := maxReferenceDepth + 1; i >= 0; i-- {
		var refs []fakeregistry.Reference
		if i <= maxReferenceDepth {
			refs = []fakeregistry.Reference{{Name: fmt.Sprintf("c%d.json", i+1), Subject: fmt.Sprintf("chain-%d", i+1), Version: 1}}
		}
		f.Register(fmt.Sprintf("chain-%d", i), fakeregistry.Schema{Type: "JSON", Text: js, Refs: refs})
	}
	var wide []fakeregistry.Reference
	for i := 0; i <= maxReferences; i++ {
		f.Register(fmt.Sprintf("leaf-%d", i), fakeregistry.Schema{Type: "JSON", Text: js})
		wide = append(wide, fakeregistry.Reference{Name: fmt.Sprintf("l%d.json", i), Subject: fmt.Sprintf("leaf-%d", i), Version: 1})
	}
	f.Register("wide", fakeregistry.Schema{Type: "JSON", Text: js, Refs: wide})
	f.Register("clash", fakeregistry.Schema{Type: "JSON", Text: js, Refs: []fakeregistry.Reference{{Name: "a.json", Subject: "leaf-0", Version: 1}, {Name: "a.json", Subject: "leaf-1", Version: 1}}})
	// A cycle: loop-a imports loop-b, which imports loop-a.
	f.Register("loop-a", fakeregistry.Schema{Type: "JSON", Text: js, Refs: []fakeregistry.Reference{{Name: "b.json", Subject: "loop-b", Version: 1}}})
	f.Register("loop-b", fakeregistry.Schema{Type: "JSON", Text: js, Refs: []fakeregistry.Reference{{Name: "a.json", Subject: "loop-a", Version: 1}}})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	for subject, want := range map[string]string{"chain-0": "nest deeper", "wide": "more than", "clash": "names both"} {
		_, err := c.Schema(ctx, record.SchemaRef{Subject: subject, Version: "1"})
		if !errors.Is(err, record.ErrSchemaInvalid) || !strings.Contains(fmt.Sprint(err), want) {
			t.Errorf("%s: %v, want ErrSchemaInvalid saying %q", subject, err, want)
		}
	}
	if _, err := c.Schema(ctx, record.SchemaRef{Subject: "loop-a", Version: "1"}); err != nil {
		t.Errorf("a reference cycle: %v", err)
	}
}

// TestRegistered: an id is a version of a subject or not; a yes is
// cached, a no is asked again (the subject may register it meanwhile), an
// id the registry does not have is not found.
func TestRegistered(t *testing.T) {
	f := fakeregistry.New()
	id := f.Register("orders-value", fakeregistry.Schema{Text: avroV1})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	if ok, err := c.Registered(ctx, "orders-value", uint32(id)); !ok || err != nil {
		t.Fatalf("a version of its subject: %v, %v", ok, err)
	}
	before := f.Requests()
	if ok, err := c.Registered(ctx, "orders-value", uint32(id)); !ok || err != nil || f.Requests() != before {
		t.Errorf("again: %v, %v, %d requests; want true from the cache", ok, err, f.Requests()-before)
	}
	if ok, err := c.Registered(ctx, "payments-value", uint32(id)); ok || err != nil {
		t.Errorf("another subject: %v, %v; want false", ok, err)
	}
	f.AlsoRegister("payments-value", id)
	if ok, err := c.Registered(ctx, "payments-value", uint32(id)); !ok || err != nil {
		t.Errorf("after the subject registered it: %v, %v; want true", ok, err)
	}
	if _, err := c.Registered(ctx, "orders-value", 999); !errors.Is(err, record.ErrSchemaNotFound) {
		t.Errorf("an unknown id: %v, want ErrSchemaNotFound", err)
	}
	f.SetFail(func(*http.Request) (int, string) { return http.StatusBadGateway, "" })
	if _, err := c.Registered(ctx, "other-value", uint32(id)); err == nil || errors.Is(err, record.ErrSchemaNotFound) {
		t.Errorf("registry down: %v, want transient", err)
	}
}

// The client is the publisher's view of the registry.
var _ publisher.Schemas = (*Client)(nil)

// TestParsedByID: a consumer's lookup by the id in the value: parsed
// with its references resolved, then cached (no request for the next
// value of that id, nor after the registry goes down); an id the
// registry does not have is ErrSchemaNotFound, an unusable schema
// ErrSchemaInvalid (not parsed again), a registry that does not answer
// neither.
func TestParsedByID(t *testing.T) {
	f := fakeregistry.New()
	f.Register("money", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; package shop; message Money { int64 cents = 1; }`})
	id := f.Register("orders-value", fakeregistry.Schema{Type: "PROTOBUF", Text: `syntax = "proto3"; package shop; import "money.proto"; message Order { Money total = 1; }`,
		Refs: []fakeregistry.Reference{{Name: "money.proto", Subject: "money", Version: 1}}})
	bad := f.Register("bad-value", fakeregistry.Schema{Type: "XML", Text: `<x/>`})
	c := newClient(t, Config{URL: f.Serve(t).URL})
	ctx := t.Context()
	s, err := c.Parsed(ctx, uint32(id))
	if err != nil || s.ID != uint32(id) || s.Type != record.SchemaTypeProtobuf {
		t.Fatalf("Parsed(%d) = %+v, %v", id, s, err)
	}
	v, err := s.AppendValue(nil, []byte(`{"total":{"cents":"250"}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if js, err := s.DecodeValue(v); err != nil || !strings.Contains(string(js), "250") {
		t.Fatalf("DecodeValue = %s, %v", js, err)
	}
	before := f.Requests()
	if again, err := c.Parsed(ctx, uint32(id)); err != nil || again != s {
		t.Errorf("second lookup: %p, %v; want the cached %p", again, err, s)
	}
	if _, err := c.Parsed(ctx, uint32(bad)); !errors.Is(err, record.ErrSchemaInvalid) {
		t.Errorf("unusable schema: %v, want ErrSchemaInvalid", err)
	}
	mid := f.Requests()
	if _, err := c.Parsed(ctx, uint32(bad)); !errors.Is(err, record.ErrSchemaInvalid) || f.Requests() != mid {
		t.Errorf("unusable schema again: %v after %d requests, want ErrSchemaInvalid from the cache", err, f.Requests()-mid)
	}
	if n := mid - before; n != 1 {
		t.Errorf("%d requests for a cached id and an unusable one, want 1", n)
	}
	if _, err := c.Parsed(ctx, 999); !errors.Is(err, record.ErrSchemaNotFound) {
		t.Errorf("unknown id: %v, want ErrSchemaNotFound", err)
	}
	f.SetDown(true)
	if again, err := c.Parsed(ctx, uint32(id)); err != nil || again != s {
		t.Errorf("cached id with the registry down: %v", err)
	}
	_, err = c.Parsed(ctx, 998)
	if err == nil || errors.Is(err, record.ErrSchemaNotFound) || errors.Is(err, record.ErrSchemaInvalid) || !errors.Is(err, ErrTransient) {
		t.Errorf("registry down: %v, want ErrTransient only", err)
	}
}
