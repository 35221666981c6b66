package outbox_test

import (
	"context"
	"encoding/binary"
	"log"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// A bytea outbox (migrate --payload-type bytea) carries payloads in a
// schema registry's wire format: the relay delivers them byte for byte,
// and consumers deserialize them with the registry as usual. Confluent's
// framing is the magic byte 0, the schema id (4 bytes, big-endian) and the
// serializer's body; the id comes from the registry through the
// application's own client (the relay needs none). See docs/formats.md.
func ExampleWithBinaryPayload() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	table, _ := migrations.ParseTable("public.outbox")
	w := outbox.NewWriter(table, outbox.WithBinaryPayload())

	const schemaID = 4711                     // registered for the invoice.issued schema, version 3
	body := []byte{0x02, 0x06, 'i', '-', '7'} // an Avro serializer's output
	payload := binary.BigEndian.AppendUint32([]byte{0}, schemaID)
	payload = append(payload, body...)

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
		AggregateType: "invoice", AggregateID: "i-7", AggregateVersion: 1,
		EventType: "invoice.issued", SchemaVersion: 3, Payload: payload,
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		log.Fatal(err)
	}
}
