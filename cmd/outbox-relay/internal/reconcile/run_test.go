package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// TestRunAgainstStack: of three committed events two reach Kafka, and the
// consumer processed one of those; Run reports the third as missing from
// Kafka and the second as not consumed.
func TestRunAgainstStack(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	pool := testenv.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema, inboxSchema := testenv.Schema(t, pool, "reconcile"), testenv.Schema(t, pool, "reconcile_inbox")
	sfx := strings.TrimPrefix(schema, "reconcile_")
	table, err := migrations.ParseTable(schema + ".outbox")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, pool, inboxSchema); err != nil {
		t.Fatal(err)
	}
	tmpl, err := publisher.ParseTopicTemplate("reconcile-test-{aggregate_type}")
	if err != nil {
		t.Fatal(err)
	}
	aggType := "agg" + sfx
	topic := tmpl.Render(aggType, "")

	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for i, id := range ids {
		if _, err := pool.Exec(ctx, `INSERT INTO `+table.Quoted()+` (event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, payload) VALUES ($1, $2, $3, 1, 'thing.done', 1, '{}')`, id, aggType, fmt.Sprint("a-", i)); err != nil {
			t.Fatal(err)
		}
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, AllowAutoTopicCreation: true, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	var msgs []kafka.Message
	for _, id := range ids[:2] {
		msgs = append(msgs, kafka.Message{Key: []byte(id.String()), Value: []byte("{}"),
			Headers: []kafka.Header{{Key: "event_id", Value: []byte(id.String())}}})
	}
	for attempt := 0; ; attempt++ { // the topic may take a moment to be created
		if err = w.WriteMessages(ctx, msgs...); err == nil || attempt == 20 {
			break
		}
		// wall-clock: paces the retries while the real broker creates the topic.
		time.Sleep(250 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	consumer := "c_" + sfx
	if _, err := pool.Exec(ctx, `INSERT INTO `+pgx.Identifier{inboxSchema, inbox.ProcessedTable}.Sanitize()+`
		(consumer, event_id, aggregate_type, aggregate_id, aggregate_version, event_type, topic, kafka_partition, kafka_offset)
		VALUES ($1, $2, $3, 'a-0', 1, 'thing.done', $4, 0, 0)`, consumer, ids[0], aggType, topic); err != nil {
		t.Fatal(err)
	}

	deps := Deps{
		Pool: pool,
		KafkaClient: func(_ string, timeout time.Duration) (*kafka.Client, func()) {
			tr := &kafka.Transport{}
			return &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: timeout, Transport: tr}, tr.CloseIdleConnections
		},
		KafkaReader: func(_ string, rc kafka.ReaderConfig) *kafka.Reader {
			rc.Brokers = brokers
			return kafka.NewReader(rc)
		},
	}
	cfg := Config{Table: table, Template: tmpl, Since: 10 * time.Minute, MaxList: 10, ReadTimeout: 20 * time.Second,
		Consumer: consumer, ConsumerURL: testenv.DatabaseURL(t), ConsumerSchema: inboxSchema}
	rep, err := Run(ctx, cfg, deps)
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Committed: 3, InKafka: 2, Processed: 1, NotConsumed: 1}
	if got := rep.Types["thing.done"]; got != want || len(rep.Types) != 1 {
		t.Errorf("counts %+v, want %+v", rep.Types, want)
	}
	if len(rep.MissingKafka) != 1 || rep.MissingKafka[0].EventID != ids[2].String() {
		t.Errorf("missing from Kafka: %+v, want %s", rep.MissingKafka, ids[2])
	}
	if len(rep.MissingConsumer) != 1 || rep.MissingConsumer[0].EventID != ids[1].String() {
		t.Errorf("not consumed: %+v, want %s", rep.MissingConsumer, ids[1])
	}
	if rep.Records != 2 || !errors.Is(rep.Err(), ErrMissing) {
		t.Errorf("records %d, err %v", rep.Records, rep.Err())
	}

	// A consumer database URL that does not parse is a configuration error.
	cfg.ConsumerURL = "postgres://h:notaport/db"
	var ce *configerr.Error
	if _, err := Run(ctx, cfg, deps); !errors.As(err, &ce) {
		t.Errorf("bad consumer URL: %v, want a *configerr.Error", err)
	}
}
