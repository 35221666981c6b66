package outboxschema_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxschema"
	"github.com/outbox-relay/outbox-relay/record"
)

// With a registry record format, the producer checks each payload against
// the schema the relay will encode it with, inside its transaction: a
// mismatch fails the Append, naming the field, and the transaction rolls
// back instead of committing an event the relay would dead-letter. The
// configuration is the relay's own (record format, subject strategy,
// version source, registry, topic template).
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	check, err := outboxschema.New(outboxschema.Config{
		Record: record.Config{Format: record.FormatAvro, Registry: record.RegistryConfig{URL: "https://registry:8081"}},
		// TopicTemplate "" is the relay's default, outbox.event.{aggregate_type}:
		// the subject is outbox.event.invoice-value.
	})
	if err != nil {
		log.Fatal(err)
	}
	table, _ := migrations.ParseTable("public.outbox")
	w := outbox.NewWriter(table, outbox.WithEventCheck(check))

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	err = w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
		AggregateType: "invoice", AggregateID: "i-7", AggregateVersion: 1,
		EventType: "invoice.issued", SchemaVersion: 3, Payload: []byte(`{"id":"i-7","total":"12.50"}`),
	})
	var se *outboxschema.SchemaError
	switch {
	case errors.As(err, &se) && !se.Unavailable:
		log.Fatalf("a producer bug: field %q of subject %s version %s: %s", se.Field, se.Subject, se.Version, se.Reason)
	case errors.Is(err, outboxschema.ErrUnavailable):
		log.Fatal("the registry cannot be asked: retry later") // nothing was written
	case err != nil:
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
