package cloudevents

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/slot"
)

// TestSDKReadsRelayRun: a real relay run on the stack (PostgreSQL, the
// replication stream, the publisher, Kafka) in cloudevents format, and the
// SDK's Kafka binding reading the records back from Kafka with sarama's
// consumer: binary mode over a jsonb outbox with a tombstone, structured
// mode over a bytea outbox (a Confluent wire-format payload).
func TestSDKReadsRelayRun(t *testing.T) {
	url, brokers := testenv.DatabaseURL(t), testenv.KafkaBrokers(t)
	for _, c := range []struct {
		mode        record.CloudEventsMode
		payloadType string
	}{
		{record.CloudEventsBinary, migrations.PayloadJSONB},
		{record.CloudEventsStructured, migrations.PayloadBytea},
	} {
		t.Run(string(c.mode), func(t *testing.T) {
			runAndRead(t, url, brokers, c.mode, c.payloadType)
		})
	}
}

func runAndRead(t *testing.T, url string, brokers []string, mode record.CloudEventsMode, payloadType string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var b [5]byte
	_, _ = rand.Read(b[:])
	sfx := hex.EncodeToString(b[:])
	table := migrations.Table{Schema: "ce_" + sfx, Name: "outbox"}
	topic := "ce." + sfx + ".order"
	cfg := relay.DefaultConfig()
	cfg.Database.URL, cfg.Kafka.Brokers = url, brokers
	cfg.Database.Table, cfg.Database.Slot, cfg.Database.Publication = table.String(), "ce_"+sfx, "ce_"+sfx
	cfg.Publish.TopicTemplate = "ce." + sfx + ".{aggregate_type}"
	cfg.Publish.Record.Format, cfg.Publish.Record.CloudEventsSource, cfg.Publish.Record.CloudEventsMode = record.FormatCloudEvents, "/orders-service", mode
	cfg.Publish.Record.TombstoneOnNullPayload = true
	cfg.Leader = relay.LeaderConfig{PollInterval: 250 * time.Millisecond, KeepaliveInterval: 250 * time.Millisecond, Timeout: 2 * time.Second}

	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for ctx.Err() == nil {
			if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, cfg.Database.Slot); err == nil {
				break
			}
			// wall-clock: paces the retries while the real server's walsender still closes.
			time.Sleep(200 * time.Millisecond)
		}
		_, _ = db.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{cfg.Database.Publication}.Sanitize())
		_, _ = db.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{table.Schema}.Sanitize()+" CASCADE")
		db.Close()
		client, done := kafkaclients.Client(cfg.Kafka, "ce-test", 10*time.Second)
		defer done()
		_, _ = client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	})
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{table.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, db, table, migrations.ApplyOptions{PayloadType: payloadType, NullablePayload: true}); err != nil {
		t.Fatal(err)
	}
	m := slot.NewManager(db, slot.Config{Name: cfg.Database.Slot, Publication: cfg.Database.Publication})
	if err := m.EnsurePublication(ctx, table.Quoted(), table.Schema, table.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx); err != nil {
		t.Fatal(err)
	}
	client, done := kafkaclients.Client(cfg.Kafka, "ce-test", 10*time.Second)
	defer done()
	if res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}}}); err != nil || res.Errors[topic] != nil {
		t.Fatalf("create topic: %v %v", err, res)
	}

	// The events: JSON (or wire-format bytes) payloads, and a tombstone.
	var opts []outbox.Option
	if payloadType == migrations.PayloadBytea {
		opts = append(opts, outbox.WithBinaryPayload())
	}
	w := outbox.NewWriter(table, opts...)
	const n = 5
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		p := []byte(`{"n":` + strconv.Itoa(i) + `,"note":"caf\u00e9"}`)
		if payloadType == migrations.PayloadBytea {
			p = []byte{0, 0, 0, 0x30, 0x39, byte(i), 0xff, 0x00}
		}
		if err := w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{AggregateType: "order", AggregateID: "order-" + sfx, AggregateVersion: int64(i),
			EventType: "order.changed", SchemaVersion: 2, Payload: p, Headers: map[string]string{"tenant": "acme"}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO `+table.Quoted()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
		VALUES (gen_random_uuid(), 'order', $1, $2, 'order.deleted', 2, NULL)`, "order-"+sfx, n+1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	type row struct {
		id, eventType string
		version       int64
		payload       []byte
	}
	rows, err := db.Query(ctx, `SELECT event_id::text, event_type, aggregate_version, `+
		map[string]string{migrations.PayloadJSONB: "convert_to(payload::text, 'UTF8')", migrations.PayloadBytea: "payload"}[payloadType]+
		` FROM `+table.Quoted()+` ORDER BY aggregate_version`)
	if err != nil {
		t.Fatal(err)
	}
	written, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.eventType, &x.version, &x.payload)
	})
	if err != nil || len(written) != n+1 {
		t.Fatalf("%d rows: %v", len(written), err)
	}

	var logs bytes.Buffer
	r, err := relay.New(cfg, relay.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("relay: %v", err)
		}
		if t.Failed() {
			t.Logf("relay logs:\n%s", logs.String())
		}
	}()

	// Read the topic with sarama, as the SDK's Kafka binding does.
	sc := sarama.NewConfig()
	sc.Version = sarama.V3_6_0_0
	consumer, err := sarama.NewConsumer(brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for i, w := range written {
		var cm *sarama.ConsumerMessage
		select {
		case cm = <-pc.Messages():
		case <-ctx.Done():
			t.Fatalf("read %d of %d records", i, len(written))
		}
		if string(cm.Key) != "order-"+sfx {
			t.Fatalf("key %q", cm.Key)
		}
		tombstone := w.payload == nil
		if tombstone != (cm.Value == nil) {
			t.Fatalf("record %d: value %q, want a tombstone: %v", i, cm.Value, tombstone)
		}
		ev := toSDK(t, cm)
		ct := "application/json"
		if payloadType == migrations.PayloadBytea {
			ct = "application/octet-stream"
		}
		if tombstone {
			ct = ""
		}
		// ce_time is the commit time to the microsecond; the record
		// timestamp is the same instant to the millisecond.
		if !ev.Time().Truncate(time.Millisecond).Equal(cm.Timestamp) || time.Since(ev.Time()) > time.Minute {
			t.Errorf("time %s, record timestamp %s", ev.Time().Format(time.RFC3339Nano), cm.Timestamp.Format(time.RFC3339Nano))
		}
		check(t, ev, want{
			id: w.id, source: "/orders-service", typ: w.eventType, subject: "order-" + sfx, aggType: "order",
			aggVersion: strconv.FormatInt(w.version, 10), schemaVersion: "2", time: ev.Time(), contentType: ct, data: w.payload,
		}, mode == record.CloudEventsStructured && !tombstone)
		var tenant string
		for _, h := range cm.Headers {
			if string(h.Key) == "tenant" {
				tenant = string(h.Value)
			}
		}
		if !tombstone && tenant != "acme" {
			t.Errorf("record %d: the row's header tenant = %q", i, tenant)
		}
	}
}
