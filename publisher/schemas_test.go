package publisher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

const testAvro = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}`

// fakeSchemas is a registry in memory: subjects and versions to schemas,
// ids per subject, and a switch that makes it unreachable.
type fakeSchemas struct {
	mu      sync.Mutex
	schemas map[record.SchemaRef]*record.Schema
	ids     map[string][]uint32
	down    bool
	calls   int
}

func newFakeSchemas(t *testing.T) *fakeSchemas {
	s, err := record.ParseSchema(context.Background(), 7, "", testAvro, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeSchemas{
		schemas: map[record.SchemaRef]*record.Schema{{Subject: "orders-value", Version: "1"}: s},
		ids:     map[string][]uint32{"orders-value": {7}},
	}
}

func (f *fakeSchemas) Schema(_ context.Context, ref record.SchemaRef) (*record.Schema, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.down {
		return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	if s, ok := f.schemas[ref]; ok {
		return s, nil
	}
	if ref.Version == "3" { // registered, but not a schema the relay can use
		return nil, fmt.Errorf("%w: subject %s version 3: schema 8: unknown type", record.ErrSchemaInvalid, ref.Subject)
	}
	return nil, fmt.Errorf("subject %s version %s: %w", ref.Subject, ref.Version, record.ErrSchemaNotFound)
}

func (f *fakeSchemas) Registered(_ context.Context, subject string, id uint32) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return false, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	for _, x := range f.ids[subject] {
		if x == id {
			return true, nil
		}
	}
	return false, nil
}

func schemaEvent(version, payload string) *replication.WALEvent {
	return &replication.WALEvent{Row: record.Row{EventID: "e-1", AggregateType: "order", AggregateID: "o-1", AggregateVersion: "1",
		EventType: "placed", SchemaVersion: version, Payload: []byte(payload)}}
}

// TestRegistryAnswers: what each answer of the registry makes of an
// event: a record, poison (with its reason), or a transient error.
func TestRegistryAnswers(t *testing.T) {
	reg := newFakeSchemas(t)
	rc := record.Config{Format: record.FormatAvro}
	enc, err := record.NewEncoder(rc)
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{cfg: config{Config: Config{MaxBatchBytes: 1 << 20, Record: rc}, Schemas: reg}, enc: enc}
	ctx := context.Background()

	msg, _, err := p.message(ctx, "orders", schemaEvent("1", `{"id":"o-1"}`))
	if err != nil || !bytes.Equal(msg.Value, []byte{0, 0, 0, 0, 7, 6, 'o', '-', '1'}) {
		t.Fatalf("registered: %x, %v", msg.Value, err)
	}
	for _, c := range []struct {
		version, payload, reason, text string
	}{
		{"2", `{"id":"o-1"}`, ReasonSchemaNotFound, "subject orders-value version 2 is not registered: register it, then dlq retry"},
		{"3", `{"id":"o-1"}`, ReasonSchemaInvalid, "subject orders-value version 3 cannot be used: registered schema cannot be used: subject orders-value version 3: schema 8: unknown type"},
		{"1", `{"id":1}`, record.CodeSchema, "subject orders-value version 1 (schema id 7): field id: want a string"},
		{"one", `{"id":"o-1"}`, record.CodeSchema, `schema_version "one" is not a registry version`},
		{"1", "\x00\x00\x00\x00\x09body", ReasonSchemaNotFound, "framed with schema id 9, which is not a version of subject orders-value"},
	} {
		_, reason, err := p.message(ctx, "orders", schemaEvent(c.version, c.payload))
		var ee *EventError
		if !errors.As(err, &ee) || reason != c.reason || !strings.Contains(ee.Reason, c.text) {
			t.Errorf("%s %q: reason %q, %v; want poison %q with %q", c.version, c.payload, reason, err, c.reason, c.text)
		}
	}
	framed := "\x00\x00\x00\x00\x07body"
	if msg, _, err := p.message(ctx, "orders", schemaEvent("1", framed)); err != nil || string(msg.Value) != framed {
		t.Errorf("a framed payload of a registered id: %q, %v", msg.Value, err)
	}

	reg.down = true
	_, reason, err := p.message(ctx, "orders", schemaEvent("1", `{"id":"o-1"}`))
	var su *SchemaUnavailableError
	if !errors.As(err, &su) || reason != "schema_registry" || su.Ref.Subject != "orders-value" {
		t.Fatalf("registry down: %q %v, want a SchemaUnavailableError", reason, err)
	}
}

// countingDeadLetters counts Poison calls.
type countingDeadLetters struct {
	mu     sync.Mutex
	poison int
}

func (*countingDeadLetters) Quarantines(*replication.WALEvent) bool { return false }
func (*countingDeadLetters) Hold(context.Context, *replication.WALEvent, string) (bool, error) {
	return false, nil
}
func (d *countingDeadLetters) Poison(context.Context, *replication.WALEvent, string, string, string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.poison++
	return nil
}

// TestPublishRegistryDownIsTransient: with the registry unreachable,
// Publish returns the transient error (the relay restarts its stream)
// and dead-letters nothing; a subject that is not registered is
// dead-lettered.
func TestPublishRegistryDownIsTransient(t *testing.T) {
	reg := newFakeSchemas(t)
	reg.down = true
	dl := &countingDeadLetters{}
	p := New([]string{"127.0.0.1:1"}, Config{TopicTemplate: "orders", NoIdempotence: true, Record: record.Config{Format: record.FormatAvro}},
		WithDeadLetters(dl), WithSchemas(reg), WithMetrics(metrics.New().Publisher()))
	defer p.Close()
	r := &router{p: p, topic: "orders", q: newQueue(), lanes: map[int]*lane{}} // no goroutine: nothing is sent
	p.routers["orders"] = r

	err := p.Publish(context.Background(), schemaEvent("1", `{"id":"o-1"}`), nopAck{})
	var su *SchemaUnavailableError
	if !errors.As(err, &su) {
		t.Fatalf("Publish with the registry down: %v, want a SchemaUnavailableError", err)
	}
	reg.down = false
	if err := p.Publish(context.Background(), schemaEvent("9", `{"id":"o-1"}`), nopAck{}); err != nil {
		t.Fatalf("an unregistered version: %v, want it dead-lettered", err)
	}
	if err := p.Publish(context.Background(), schemaEvent("1", `{"id":"o-1"}`), nopAck{}); err != nil {
		t.Fatal(err)
	}
	dl.mu.Lock()
	defer dl.mu.Unlock()
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	if dl.poison != 1 || len(r.q.items) != 1 {
		t.Fatalf("dead-lettered %d, queued %d; want 1 and 1", dl.poison, len(r.q.items))
	}
}

func TestRegistryFormatNeedsSchemas(t *testing.T) {
	p := New([]string{"127.0.0.1:1"}, Config{TopicTemplate: "orders", NoIdempotence: true, Record: record.Config{Format: record.FormatProtobuf}})
	defer p.Close()
	if err := p.Publish(context.Background(), schemaEvent("1", `{}`), nopAck{}); err == nil || !strings.Contains(err.Error(), "WithSchemas") {
		t.Fatalf("%v", err)
	}
}

// TestForwardWaitsOutTheRegistry: an event the quarantine releases while
// the registry is down is retried with backoff until it answers, never
// dead-lettered; a closing publisher ends the wait.
func TestForwardWaitsOutTheRegistry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := newFakeSchemas(t)
		reg.down = true
		p := New([]string{"127.0.0.1:1"}, Config{TopicTemplate: "orders", NoIdempotence: true, Record: record.Config{Format: record.FormatAvro}},
			WithSchemas(reg), WithMetrics(metrics.New().Publisher()))
		rec := &outgoing{ev: schemaEvent("1", `{"id":"o-1"}`)}
		rec.msg.Topic = "orders"
		type result struct {
			err error
			ok  bool
		}
		done := make(chan result, 1)
		go func() {
			_, _, err, ok := p.forwardable(rec)
			done <- result{err, ok}
		}()
		// The fake clock of the bubble: a minute of backoff after backoff
		// passes at once, and the registry stays down throughout.
		time.Sleep(time.Minute)
		reg.mu.Lock()
		calls := reg.calls
		reg.down = false
		reg.mu.Unlock()
		if calls < 3 {
			t.Fatalf("%d lookups in a minute of backoff, want several", calls)
		}
		if r := <-done; r.err != nil || !r.ok {
			t.Fatalf("after the registry came back: %v, %v", r.err, r.ok)
		}

		reg.mu.Lock()
		reg.down = true
		reg.mu.Unlock()
		go func() {
			_, _, err, ok := p.forwardable(rec)
			done <- result{err, ok}
		}()
		synctest.Wait() // forwardable is in its backoff
		p.Close()
		if r := <-done; r.ok {
			t.Fatalf("closing: ok=%v, want the wait ended", r.ok)
		}
	})
}
