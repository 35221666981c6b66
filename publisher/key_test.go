package publisher

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/internal/testutil/fakeregistry"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// keyPublisher is a Publisher of format with --schema-key, encoding
// against f through the real registry client.
func keyPublisher(t *testing.T, f *fakeregistry.Registry, format record.Format) *Publisher {
	t.Helper()
	c, err := schemareg.New(schemareg.Config{URL: f.Serve(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	rc := record.Config{Format: format, KeySchema: true, SchemaVersion: record.VersionLatest}
	enc, err := record.NewEncoder(rc)
	if err != nil {
		t.Fatal(err)
	}
	return &Publisher{cfg: config{Config: Config{MaxBatchBytes: 1 << 20, Record: rc}, Schemas: c}, enc: enc}
}

// TestRegistryKeySchema: with Config.KeySchema the record key is the
// aggregate_id framed with the id of the latest <topic>-key schema, in
// the format's string form, and decodes back to the aggregate_id; a key
// subject that is missing, or not a string's, is poison with the value's
// reasons (issue 48: "A key schema is optional").
func TestRegistryKeySchema(t *testing.T) {
	ctx := context.Background()
	f := fakeregistry.New()
	f.Register("orders-value", fakeregistry.Schema{Text: testAvro})
	keyID := f.Register("orders-key", fakeregistry.Schema{Text: `"string"`})
	f.Register("bad-value", fakeregistry.Schema{Text: testAvro})
	f.Register("bad-key", fakeregistry.Schema{Text: testAvro}) // a record, not a string
	f.Register("nokey-value", fakeregistry.Schema{Text: testAvro})
	f.Register("js-value", fakeregistry.Schema{Type: "JSON", Text: `{"type":"object"}`})
	jsKeyID := f.Register("js-key", fakeregistry.Schema{Type: "JSON", Text: `{"type":"string","maxLength":8}`})
	p := keyPublisher(t, f, record.FormatAvro)

	msg, _, err := p.message(ctx, "orders", keyEvent())
	if want := []byte{0, 0, 0, 0, byte(keyID), 6, 'o', '-', '1'}; err != nil || !bytes.Equal(msg.Key, want) {
		t.Fatalf("avro key: %x, %v; want %x", msg.Key, err, want)
	}
	if agg, id, err := record.DecodeKey(msg.Key, record.FormatAvro); agg != "o-1" || id != uint32(keyID) || err != nil {
		t.Errorf("DecodeKey: %q %d %v", agg, id, err)
	}
	ev, err := record.Decode(msg)
	if err != nil || ev.AggregateID != "o-1" || ev.KeySchemaID != uint32(keyID) || ev.SchemaID == 0 {
		t.Errorf("Decode: %+v, %v", ev, err)
	}

	for _, c := range []struct{ topic, reason, text string }{
		{"nokey", ReasonSchemaNotFound, `key subject nokey-key version latest is not registered: register the key schema, then dlq retry`},
		{"bad", ReasonSchemaInvalid, `key subject bad-key version latest (schema id 4): registered schema cannot be used: schema 4 is not the Avro primitive "string"`},
	} {
		_, reason, err := p.message(ctx, c.topic, keyEvent())
		var ee *EventError
		if !errors.As(err, &ee) || reason != c.reason || !strings.Contains(ee.Reason, c.text) {
			t.Errorf("%s: reason %q, %v; want poison %q with %q", c.topic, reason, err, c.reason, c.text)
		}
	}

	js := keyPublisher(t, f, record.FormatJSONSchema)
	msg, _, err = js.message(ctx, "js", keyEvent())
	if want := append([]byte{0, 0, 0, 0, byte(jsKeyID)}, `"o-1"`...); err != nil || !bytes.Equal(msg.Key, want) {
		t.Fatalf("json-schema key: %q, %v; want %q", msg.Key, err, want)
	}
	if ev, err := record.DecodeFormat(msg, record.FormatJSONSchema); err != nil || ev.AggregateID != "o-1" || ev.KeySchemaID != uint32(jsKeyID) {
		t.Errorf("DecodeFormat json-schema: %+v, %v", ev, err)
	}
	long := keyEvent()
	long.AggregateID = "order-123456789"
	if _, reason, err := js.message(ctx, "js", long); reason != record.CodeSchema || !strings.Contains(err.Error(), "key subject js-key") {
		t.Errorf("an aggregate id the key schema refuses: %q, %v", reason, err)
	}

	f.SetDown(true)
	down := keyPublisher(t, f, record.FormatAvro) // nothing cached
	_, reason, err := down.message(ctx, "orders", keyEvent())
	var su *SchemaUnavailableError
	if !errors.As(err, &su) || reason != "schema_registry" {
		t.Errorf("registry down: %q %v, want a SchemaUnavailableError", reason, err)
	}
}

// TestKeySchemaPartition: a framed key goes to the partition of its
// aggregate_id, as the record without a key schema does; the framed bytes
// themselves would hash elsewhere.
func TestKeySchemaPartition(t *testing.T) {
	f := fakeregistry.New()
	f.Register("orders-value", fakeregistry.Schema{Text: testAvro})
	f.Register("orders-key", fakeregistry.Schema{Text: `"string"`})
	p := keyPublisher(t, f, record.FormatAvro)
	parts := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	var murmur kafka.Murmur2Balancer
	moved := 0
	for _, agg := range []string{"o-1", "o-2", "customer-42", "a", "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f", "ü"} {
		ev := keyEvent()
		ev.AggregateID = agg
		msg, _, err := p.message(context.Background(), "orders", ev)
		if err != nil {
			t.Fatal(err)
		}
		native := murmur.Balance(kafka.Message{Key: []byte(agg)}, parts...)
		if got := aggregateBalancer(p.cfg.Record).Balance(msg, parts...); got != native {
			t.Errorf("%s: SyncWriter partition %d, want %d", agg, got, native)
		}
		if got := murmur.Balance(kafka.Message{Key: []byte(ev.AggregateID)}, parts...); got != native {
			t.Errorf("%s: router partition %d, want %d", agg, got, native)
		}
		if murmur.Balance(msg, parts...) != native {
			moved++
		}
	}
	if moved == 0 {
		t.Error("the framed keys hash like the aggregate ids: the test proves nothing")
	}
}

func keyEvent() *replication.WALEvent {
	ev := schemaEvent("1", `{"id":"o-1"}`)
	ev.EventID = "0190d5a4-7c4e-7d1a-8b3e-0a1b2c3d4e5f"
	return ev
}
