package tracing

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/slot"
)

// world is one test's isolated share of the stack (scripts/stack.sh): a
// schema with the outbox table, publication, slots and topics of its own,
// all removed when the test ends.
type world struct {
	t      *testing.T
	db     *pgxpool.Pool
	url    string
	cfg    relay.Config
	table  migrations.Table
	sfx    string
	slots  []string
	topics []string
}

func randSuffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newWorld creates the outbox table and its publication; relayConfig
// adds a slot and topic per relay.
func newWorld(t *testing.T) *world {
	t.Helper()
	url, brokers := testenv.DatabaseURL(t), testenv.KafkaBrokers(t)
	w := &world{t: t, url: url, sfx: randSuffix()}
	w.table = migrations.Table{Schema: "tr_" + w.sfx, Name: "outbox"}
	w.cfg = relay.DefaultConfig()
	w.cfg.Database.URL, w.cfg.Kafka.Brokers = url, brokers
	w.cfg.Database.Table, w.cfg.Database.Publication = w.table.String(), "tr_"+w.sfx
	w.cfg.Leader = relay.LeaderConfig{PollInterval: 250 * time.Millisecond, KeepaliveInterval: 250 * time.Millisecond, Timeout: 2 * time.Second}
	w.cfg.Checkpoints.Interval = 200 * time.Millisecond
	w.cfg.ShutdownTimeout = 10 * time.Second
	w.cfg.Stats.Interval = 0

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	w.db = db
	t.Cleanup(w.cleanup) // registered first: runs after the relays and consumers stopped
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{w.table.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, db, w.table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// relayConfig returns the configuration of a relay with a slot and a
// topic of its own (created now, so the events written after this call
// are kept for it), and the topic.
func (w *world) relayConfig(name string) (relay.Config, string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := w.cfg
	cfg.Database.Slot = "tr_" + w.sfx + "_" + name
	prefix := "tr." + w.sfx + "." + name
	cfg.Publish.TopicTemplate = prefix + ".{aggregate_type}"
	m := slot.NewManager(w.db, slot.Config{Name: cfg.Database.Slot, Publication: cfg.Database.Publication})
	if err := m.EnsurePublication(ctx, w.table.Quoted(), w.table.Schema, w.table.Name); err != nil {
		w.t.Fatal(err)
	}
	if _, err := m.Create(ctx); err != nil {
		w.t.Fatal(err)
	}
	w.slots = append(w.slots, cfg.Database.Slot)
	topic := prefix + ".order"
	w.createTopic(ctx, topic)
	return cfg, topic
}

func (w *world) createTopic(ctx context.Context, topic string) {
	client, done := kafkaclients.Client(w.cfg.Kafka, "tracing-test", 10*time.Second)
	defer done()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 3, ReplicationFactor: 1}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		w.t.Fatalf("create topic %s: %v", topic, err)
	}
	w.topics = append(w.topics, topic)
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
		if err == nil && len(md.Topics) == 1 && md.Topics[0].Error == nil && len(md.Topics[0].Partitions) == 3 {
			return
		}
		select {
		case <-ctx.Done():
			w.t.Fatalf("topic %s has no leaders: %v", topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// records counts the records of topic (the sum of its partitions' end
// offsets).
func (w *world) records(ctx context.Context, topic string) (int64, error) {
	client, done := kafkaclients.Client(w.cfg.Kafka, "tracing-test", 10*time.Second)
	defer done()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0), kafka.LastOffsetOf(1), kafka.LastOffsetOf(2)}}}
	res, err := client.ListOffsets(ctx, req)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return 0, p.Error
		}
		n += p.LastOffset
	}
	return n, nil
}

func (w *world) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range w.slots {
		for {
			_, err := w.db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, s)
			if err == nil || ctx.Err() != nil {
				break
			}
			// wall-clock: paces the retries while the real server's walsender still closes.
			time.Sleep(200 * time.Millisecond)
		}
	}
	for _, stmt := range []string{
		"DROP PUBLICATION IF EXISTS " + pgx.Identifier{w.cfg.Database.Publication}.Sanitize(),
		"DROP SCHEMA IF EXISTS " + pgx.Identifier{w.table.Schema}.Sanitize() + " CASCADE",
	} {
		if _, err := w.db.Exec(ctx, stmt); err != nil {
			w.t.Logf("cleanup: %s: %v", stmt, err)
		}
	}
	if len(w.topics) > 0 {
		client, done := kafkaclients.Client(w.cfg.Kafka, "tracing-test", 10*time.Second)
		_, _ = client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: w.topics})
		done()
	}
	w.db.Close()
}

// inboxSchema names a schema for a consumer's inbox tables (inbox.Migrate
// creates it), dropped when the test ends.
func (w *world) inboxSchema(name string) string {
	s := "tr_" + w.sfx + "_" + name
	w.t.Cleanup(func() {
		_, _ = w.db.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE")
	})
	return s
}

// eventually polls cond every 50 ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		// wall-clock: polls what the relay and the real servers did; nothing signals it.
		time.Sleep(50 * time.Millisecond)
	}
}
