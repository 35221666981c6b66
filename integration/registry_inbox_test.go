//go:build integration

package integration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestRegistryInbox: relay -> Kafka -> inbox with a registry format. The
// relay binary encodes each row with the registered schema (Avro, then
// Protobuf) against the stack's registry; an inbox consumer configured
// with the same registry reads the topic and hands its handler each event
// with the payload decoded back to JSON, equal to the row's, with the
// schema id of the record's frame and the subject TopicNameStrategy
// names. Nothing is dead-lettered (issue 48).
func TestRegistryInbox(t *testing.T) {
	inSuites(t, parallel, stack)
	reg := registryURL(t)
	for _, f := range registryFormats[:2] { // avro, protobuf
		t.Run(f.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{Partitions: 3})
			subject := env.Topic + "-value"
			register(t, reg, subject, f.schemaType, f.v1)
			id := register(t, reg, subject, f.schemaType, f.v2)
			relay := env.StartRelay(registryEnv(f.name, reg)...)
			defer relay.Term(10 * time.Second)
			const n = 12
			// No zero values: proto3 leaves them out of the body.
			rows := writeFormatRows(t, env, n, false, func(i int) any {
				return fmt.Sprintf(`{"n": %d, "sku": "s-%d", "qty": %d}`, i+1, i, 10*(i+1))
			})
			recs := recordsByID(t, waitRaw(t, env.Topic, env.Partitions, len(rows), 60*time.Second))
			for _, row := range rows {
				if r := recs[row.id]; len(r.Value) < 5 || binary.BigEndian.Uint32(r.Value[1:5]) != uint32(id) {
					t.Fatalf("event %s: value %x, want the frame of schema id %d", row.id, r.Value, id)
				}
			}

			schema := inboxSchema(t, env)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pool, err := pgxpool.New(ctx, databaseURL)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if err := inbox.Migrate(ctx, pool, schema); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			got := map[string]record.Event{}
			c, err := inbox.New(inbox.Config{
				Name: "reg_" + env.Sfx, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema,
				RecordFormat: record.Format(f.name),
				Schemas:      inbox.SchemaConfig{Registry: record.RegistryConfig{URL: reg}},
				Handler: func(_ context.Context, _ pgx.Tx, ev *record.Event) error {
					mu.Lock()
					defer mu.Unlock()
					got[ev.ID] = *ev
					return nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- c.Run(runCtx) }()
			ok := within(45*time.Second, 50*time.Millisecond, func() bool { return c.Stats().Applied >= int64(len(rows)) })
			stop()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !ok || c.Stats().DeadLettered != 0 {
				t.Fatalf("inbox: %+v, want %d applied and none dead-lettered", c.Stats(), len(rows))
			}
			mu.Lock()
			defer mu.Unlock()
			for _, row := range rows {
				ev, found := got[row.id]
				if !found {
					t.Fatalf("event %s not handled", row.id)
				}
				var payload, decoded map[string]any
				if err := json.Unmarshal(row.payload, &payload); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(ev.Payload, &decoded); err != nil {
					t.Fatalf("event %s: payload %q is not JSON: %v", row.id, ev.Payload, err)
				}
				// normalize: protojson writes an int64 as a string
				if w, g := normalize(t, payload), normalize(t, decoded); !reflect.DeepEqual(g, w) {
					t.Errorf("event %s: payload %v, want the row's %v", row.id, g, w)
				}
				if ev.SchemaID != uint32(id) || ev.Subject != subject || ev.AggregateID != row.aggID || ev.AggregateVersion != row.version ||
					ev.SchemaVersion != 2 || ev.Headers["tenant"] != "acme" {
					t.Errorf("event %s: %+v, want schema id %d subject %s", row.id, ev, id, subject)
				}
			}
			t.Logf("%d %s events decoded by the inbox with schema id %d", len(rows), f.name, id)
		})
	}
}
