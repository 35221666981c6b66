package relay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

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

// stack is one test's isolated world on the local stack
// (scripts/stack.sh): its own schema with the outbox table, slot,
// publication and topic, all removed when the test ends.
type stack struct {
	t          *testing.T
	db         *pgxpool.Pool
	cfg        relay.Config
	table      migrations.Table
	topic      string
	partitions int
	logs       *syncBuffer
}

// newStack creates the world: the outbox table (migrations.Apply), its
// publication and slot (so events written before a relay starts are
// kept), and a topic of partitions partitions.
func newStack(t *testing.T, partitions int) *stack {
	t.Helper()
	url, brokers := testenv.DatabaseURL(t), testenv.KafkaBrokers(t)
	sfx := randSuffix()
	s := &stack{t: t, partitions: partitions, logs: &syncBuffer{},
		table: migrations.Table{Schema: "rt_" + sfx, Name: "outbox"}, topic: "rt." + sfx + ".order"}
	s.cfg = relay.DefaultConfig()
	s.cfg.Database.URL, s.cfg.Kafka.Brokers = url, brokers
	s.cfg.Database.Table, s.cfg.Database.Slot, s.cfg.Database.Publication = s.table.String(), "rt_"+sfx, "rt_"+sfx
	s.cfg.Publish.TopicTemplate = "rt." + sfx + ".{aggregate_type}"
	s.cfg.Leader = relay.LeaderConfig{PollInterval: 250 * time.Millisecond, KeepaliveInterval: 250 * time.Millisecond, Timeout: 2 * time.Second}
	s.cfg.Checkpoints.Interval = 200 * time.Millisecond
	s.cfg.ShutdownTimeout = 10 * time.Second

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	t.Cleanup(s.cleanup) // registered first: runs after the relays stopped
	if _, err := db.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.table.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, db, s.table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	m := slot.NewManager(db, slot.Config{Name: s.cfg.Database.Slot, Publication: s.cfg.Database.Publication})
	if err := m.EnsurePublication(ctx, s.table.Quoted(), s.table.Schema, s.table.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx); err != nil {
		t.Fatal(err)
	}
	s.createTopic(ctx)
	return s
}

func (s *stack) createTopic(ctx context.Context) {
	client, done := kafkaclients.Client(s.cfg.Kafka, "relay-test", 10*time.Second)
	defer done()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: s.topic, NumPartitions: s.partitions, ReplicationFactor: 1}},
	})
	if err == nil {
		err = res.Errors[s.topic]
	}
	if err != nil {
		s.t.Fatalf("create topic %s: %v", s.topic, err)
	}
	for {
		md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{s.topic}})
		if err == nil && len(md.Topics) == 1 && md.Topics[0].Error == nil && len(md.Topics[0].Partitions) == s.partitions {
			return
		}
		select {
		case <-ctx.Done():
			s.t.Fatalf("topic %s has no leaders: %v", s.topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *stack) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if s.t.Failed() {
		s.t.Logf("relay logs:\n%s", s.logs.String())
	}
	for {
		_, err := s.db.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, s.cfg.Database.Slot)
		if err == nil || ctx.Err() != nil {
			break
		}
		// wall-clock: paces the retries while the real server's walsender still closes.
		time.Sleep(200 * time.Millisecond)
	}
	for _, stmt := range []string{
		"DROP PUBLICATION IF EXISTS " + pgx.Identifier{s.cfg.Database.Publication}.Sanitize(),
		"DROP SCHEMA IF EXISTS " + pgx.Identifier{s.table.Schema}.Sanitize() + " CASCADE",
	} {
		if _, err := s.db.Exec(ctx, stmt); err != nil {
			s.t.Logf("cleanup: %s: %v", stmt, err)
		}
	}
	s.db.Close()
	client, done := kafkaclients.Client(s.cfg.Kafka, "relay-test", 10*time.Second)
	defer done()
	_, _ = client.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{s.topic}})
}

// newRelay returns a relay of the stack's configuration, logging to the
// stack's buffer under name.
func (s *stack) newRelay(name string) *relay.Relay {
	s.t.Helper()
	log := slog.New(slog.NewTextHandler(s.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("relay", name)
	r, err := relay.New(s.cfg, relay.WithLogger(log))
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// start runs r until the returned stop is called; stop waits for Run and
// returns its error.
func start(r *relay.Relay) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-done
		})
		return err
	}
}

// write commits n events over aggregates aggregates, perTx per
// transaction, pausing between transactions; aggregate a's versions
// count 1, 2, 3, ...
func (s *stack) write(ctx context.Context, n, aggregates, perTx int, pause time.Duration) error {
	w := outbox.NewWriter(s.table)
	versions := make([]int64, aggregates)
	for i := 0; i < n; {
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return err
		}
		for j := 0; j < perTx && i < n; j, i = j+1, i+1 {
			a := i % aggregates
			versions[a]++
			err := w.Append(ctx, outbox.PgxTx(tx), &outbox.Event{
				AggregateType: "order", AggregateID: "agg-" + strconv.Itoa(a), AggregateVersion: versions[a],
				EventType: "order.changed", SchemaVersion: 1, Payload: []byte(`{"n":` + strconv.Itoa(i) + `}`),
			})
			if err != nil {
				_ = tx.Rollback(ctx)
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		if pause > 0 {
			// wall-clock: spreads the commits out, so a running relay streams them as they come.
			time.Sleep(pause)
		}
	}
	return nil
}

// delivery is what a consumer of the topic saw.
type delivery struct {
	distinct, duplicates int
}

// consume reads every partition of the topic from the start until want
// distinct events arrived or ctx ends. It fails the test when an
// aggregate's events arrive out of order: a version first seen before
// the one preceding it (a duplicate of an earlier one is fine).
func (s *stack) consume(ctx context.Context, want int) delivery {
	s.t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	maxVersion := map[string]int64{}
	var d delivery
	var wg sync.WaitGroup
	for p := 0; p < s.partitions; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			rd := kafkaclients.Reader(s.cfg.Kafka, "relay-test", kafka.ReaderConfig{Topic: s.topic, Partition: p, MinBytes: 1, MaxBytes: 10 << 20, MaxWait: 200 * time.Millisecond})
			defer rd.Close()
			for {
				m, err := rd.ReadMessage(ctx)
				if err != nil {
					return
				}
				id, version := header(m, record.HeaderEventID), header(m, record.HeaderAggregateVersion)
				v, _ := strconv.ParseInt(version, 10, 64)
				mu.Lock()
				agg := string(m.Key)
				if v > maxVersion[agg]+1 {
					s.t.Errorf("aggregate %s: version %d arrived after %d (partition %d offset %d)", agg, v, maxVersion[agg], p, m.Offset)
				}
				maxVersion[agg] = max(maxVersion[agg], v)
				if seen[id] {
					d.duplicates++
				} else {
					seen[id] = true
					d.distinct++
				}
				if d.distinct >= want {
					cancel()
				}
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	if d.distinct != want {
		s.t.Fatalf("consumed %d distinct events (%d duplicates), want %d", d.distinct, d.duplicates, want)
	}
	return d
}

func header(m kafka.Message, key string) string {
	for _, h := range m.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	// wall-clock: cond reads what a relay did against the real servers; nothing signals it.
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func randSuffix() string {
	var b [5]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b[:])
}

// syncBuffer is a bytes.Buffer safe for the relay's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
