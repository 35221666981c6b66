//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
	"github.com/outbox-relay/outbox-relay/record"
)

// kfRecord is a record as the tests compare them.
type kfRecord struct {
	offset     int64
	key, value string
}

func (r kfRecord) String() string { return fmt.Sprintf("%d:%s=%s", r.offset, r.key, r.value) }

// kfTopic creates a topic of one partition, deleted at cleanup.
func kfTopic(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	topic := "it.kf." + name + "." + randSuffix()
	client := kafkaClient()
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		_, _ = kafkaClient().DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	})
	// Wait for the partition's leader: the transactional produce below
	// does not retry NOT_LEADER.
	if !within(30*time.Second, 100*time.Millisecond, func() bool {
		res, err := kafkaClient().ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
		return err == nil && len(res.Topics[topic]) == 1 && res.Topics[topic][0].Error == nil
	}) {
		t.Fatalf("topic %s has no leader after 30s", topic)
	}
	return topic
}

// kfJava runs a class of the stack's Kafka jars and returns its stdout.
func kfJava(t *testing.T, timeout time.Duration, class string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(repoRoot, "scripts", "stack.sh"), "kafka-class", class}, args...)...)
	cmd.Env = append(os.Environ(), "KAFKA_CLASS_JAVA_OPTS=-Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\nstderr: %s\nstdout: %s", class, err, tail(stderr.String(), 20), tail(stdout.String(), 20))
	}
	return stdout.String()
}

var consoleLine = regexp.MustCompile(`^Offset:(\d+)\t(.*)\t(.*)$`)

// kfConsole is what Kafka's own console consumer reads of topic in an
// isolation level.
func kfConsole(t *testing.T, topic, isolation string) []kfRecord {
	t.Helper()
	out := kfJava(t, 2*time.Minute, "org.apache.kafka.tools.consumer.ConsoleConsumer",
		"--bootstrap-server", strings.Join(kafkaBrokers, ","), "--topic", topic, "--from-beginning",
		"--isolation-level", isolation, "--timeout-ms", "8000",
		"--property", "print.offset=true", "--property", "print.key=true")
	var recs []kfRecord
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := consoleLine.FindStringSubmatch(sc.Text())
		if m == nil {
			t.Fatalf("console consumer printed %q", sc.Text())
		}
		off, _ := strconv.ParseInt(m[1], 10, 64)
		recs = append(recs, kfRecord{offset: off, key: m[2], value: m[3]})
	}
	return recs
}

// kfRead reads topic's partition 0 from its start with the inbox's
// reader until it stays idle for 3 s.
func kfRead(t *testing.T, topic string, readUncommitted bool) []kfRecord {
	t.Helper()
	r, err := kafkafetch.New(kafkafetch.Config{Brokers: kafkaBrokers, Topic: topic, Offset: kafka.FirstOffset, ReadUncommitted: readUncommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var recs []kfRecord
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := r.FetchMessage(ctx)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			return recs
		}
		if err != nil {
			t.Fatalf("FetchMessage: %v", err)
		}
		if m.Topic != topic || m.Partition != 0 || m.HighWaterMark <= m.Offset {
			t.Fatalf("message %s/%d@%d, high watermark %d", m.Topic, m.Partition, m.Offset, m.HighWaterMark)
		}
		recs = append(recs, kfRecord{offset: m.Offset, key: string(m.Key), value: string(m.Value)})
	}
}

// kfKafkaGoReader is what kafka-go's own Reader reads with ReadCommitted,
// for the log: the records the inbox read before.
func kfKafkaGoReader(topic string) (n int, markers int) {
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: kafkaBrokers, Topic: topic, IsolationLevel: kafka.ReadCommitted, MaxWait: 500 * time.Millisecond})
	defer r.Close()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		m, err := r.FetchMessage(ctx)
		cancel()
		if err != nil {
			return n, markers
		}
		n++
		if len(m.Key) == 4 && m.Key[0] == 0 && m.Key[1] == 0 && m.Key[2] == 0 && m.Key[3] <= 1 {
			markers++
		}
	}
}

// TestKafkaFetchReadCommitted: Kafka's TransactionalMessageCopier (a Java
// transactional producer) copies a topic in transactions of 25 records
// and aborts about one in three at random (then copies those records
// again). The inbox's reader must read the copy as Kafka's own console
// consumer does: read_committed, the same records at the same offsets in
// the same order - each input record exactly once, no aborted one, no
// marker; read_uncommitted, every record including the aborted copies.
func TestKafkaFetchReadCommitted(t *testing.T) {
	inSuites(t, parallel, stack)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 1000
	in, out := kfTopic(t, ctx, "in"), kfTopic(t, ctx, "out")
	w := &kafka.Writer{Addr: kafka.TCP(kafkaBrokers...), Topic: in, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	msgs := make([]kafka.Message, n)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%04d", i)), Value: []byte(fmt.Sprintf("v%04d", i))}
	}
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if !errors.Is(err, kafka.UnknownTopicOrPartition) && !errors.Is(err, kafka.LeaderNotAvailable) || ctx.Err() != nil {
			t.Fatalf("produce: %v", err)
		}
		// wall-clock: retry interval until the topic is ready (ctx bounds it)
		time.Sleep(200 * time.Millisecond)
	}
	w.Close()

	began := time.Now()
	kfJava(t, 3*time.Minute, "org.apache.kafka.tools.TransactionalMessageCopier",
		"--broker-list", strings.Join(kafkaBrokers, ","), "--input-topic", in, "--input-partition", "0",
		"--output-topic", out, "--transactional-id", "it-kf-"+randSuffix(), "--consumer-group", "it-kf-"+randSuffix(),
		"--transaction-size", "25", "--enable-random-aborts", "--max-messages", strconv.Itoa(n))
	t.Logf("TransactionalMessageCopier copied %d records in %s", n, time.Since(began).Round(time.Millisecond))

	javaRC := kfConsole(t, out, "read_committed")
	javaRU := kfConsole(t, out, "read_uncommitted")
	goRC := kfRead(t, out, false)
	goRU := kfRead(t, out, true)
	goNaive, goNaiveMarkers := kfKafkaGoReader(out)
	hwm := kfHighWatermark(t, ctx, out)
	t.Logf("output topic: high watermark %d; console consumer read_committed %d records, read_uncommitted %d; kafkafetch read_committed %d, read_uncommitted %d; kafka-go's Reader (ReadCommitted) %d, of them %d markers",
		hwm, len(javaRC), len(javaRU), len(goRC), len(goRU), goNaive, goNaiveMarkers)

	if !slices.Equal(goRC, javaRC) {
		t.Errorf("read_committed: kafkafetch and the console consumer differ:\nkafkafetch: %v\nconsole:    %v", head(goRC), head(javaRC))
	}
	if !slices.Equal(goRU, javaRU) {
		t.Errorf("read_uncommitted: kafkafetch and the console consumer differ:\nkafkafetch: %v\nconsole:    %v", head(goRU), head(javaRU))
	}
	// read_committed is the input, once each, in order.
	if len(goRC) != n {
		t.Errorf("read_committed: %d records, want the %d input records", len(goRC), n)
	}
	for i, r := range goRC {
		if want := fmt.Sprintf("k%04d", i); r.key != want || r.value != fmt.Sprintf("v%04d", i) {
			t.Fatalf("read_committed record %d is %v, want key %s", i, r, want)
		}
	}
	if len(goRU) <= len(goRC) {
		t.Errorf("read_uncommitted: %d records, read_committed %d: the copier aborted nothing?", len(goRU), len(goRC))
	}
	// Markers take offsets too: the log has more offsets than records.
	if markers := hwm - int64(len(goRU)); markers <= 0 {
		t.Errorf("high watermark %d and %d data records: no offset left for markers", hwm, len(goRU))
	}
}

func head(rs []kfRecord) []kfRecord { return rs[:min(len(rs), 40)] }

// kfHighWatermark is the partition's high watermark.
func kfHighWatermark(t *testing.T, ctx context.Context, topic string) int64 {
	t.Helper()
	res, err := kafkaClient().ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: {kafka.LastOffsetOf(0)}}})
	if err != nil {
		t.Fatal(err)
	}
	p := res.Topics[topic][0]
	if p.Error != nil {
		t.Fatal(p.Error)
	}
	return p.LastOffset
}

// kfProducer is a transactional producer over kafka-go's protocol layer
// (kafka-go has none): InitProducerId, AddPartitionsToTxn, a produce of a
// transactional record batch, EndTxn.
type kfProducer struct {
	client     *kafka.Client
	tid, topic string
	pid, epoch int
	seq        int32
}

func newKfProducer(t *testing.T, ctx context.Context, tid, topic string) *kfProducer {
	t.Helper()
	p := &kfProducer{client: kafkaClient(), tid: tid, topic: topic}
	for {
		res, err := p.client.InitProducerID(ctx, &kafka.InitProducerIDRequest{TransactionalID: tid, TransactionTimeoutMs: 60000, ProducerID: -1, ProducerEpoch: -1})
		if err == nil {
			err = res.Error
		}
		if err == nil {
			p.pid, p.epoch = res.Producer.ProducerID, res.Producer.ProducerEpoch
			return p
		}
		// The coordinator may still be loading, or aborting the
		// transaction of the producer this one fences.
		if !errors.Is(err, kafka.ConcurrentTransactions) && !errors.Is(err, kafka.GroupLoadInProgress) &&
			!errors.Is(err, kafka.GroupCoordinatorNotAvailable) && !errors.Is(err, kafka.NotCoordinatorForGroup) || ctx.Err() != nil {
			t.Fatalf("InitProducerId %s: %v", tid, err)
		}
		// wall-clock: retry interval while the coordinator loads or fences (ctx bounds it)
		time.Sleep(100 * time.Millisecond)
	}
}

// send writes msgs in the open transaction (opening it).
func (p *kfProducer) send(t *testing.T, ctx context.Context, msgs []kafka.Message) {
	t.Helper()
	// The coordinator answers CONCURRENT_TRANSACTIONS while it still
	// writes the markers of the transaction before: retry, as Java does.
	for {
		add, err := p.client.AddPartitionsToTxn(ctx, &kafka.AddPartitionsToTxnRequest{TransactionalID: p.tid, ProducerID: p.pid, ProducerEpoch: p.epoch,
			Topics: map[string][]kafka.AddPartitionToTxn{p.topic: {{Partition: 0}}}})
		if err == nil {
			for _, ps := range add.Topics {
				for _, pa := range ps {
					err = cmp.Or(err, pa.Error)
				}
			}
		}
		if err == nil {
			break
		}
		if !errors.Is(err, kafka.ConcurrentTransactions) || ctx.Err() != nil {
			t.Fatalf("AddPartitionsToTxn: %v", err)
		}
		// wall-clock: retry interval while the previous transaction ends (ctx bounds it)
		time.Sleep(20 * time.Millisecond)
	}
	res, err := p.client.RawProduce(ctx, &kafka.RawProduceRequest{Topic: p.topic, Partition: 0, RequiredAcks: kafka.RequireAll, TransactionalID: p.tid,
		RawRecords: protocol.RawRecordSet{Reader: bytes.NewReader(kfBatch(msgs, p.pid, p.epoch, p.seq))}})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatalf("produce in a transaction: %v", err)
	}
	p.seq += int32(len(msgs))
}

// end commits or aborts the open transaction.
func (p *kfProducer) end(t *testing.T, ctx context.Context, commit bool) {
	t.Helper()
	res, err := p.client.EndTxn(ctx, &kafka.EndTxnRequest{TransactionalID: p.tid, ProducerID: p.pid, ProducerEpoch: p.epoch, Committed: commit})
	if err == nil {
		err = res.Error
	}
	if err != nil {
		t.Fatalf("EndTxn(commit=%v): %v", commit, err)
	}
}

// kfBatch is msgs as one transactional record batch, its int32 size first.
func kfBatch(msgs []kafka.Message, pid, epoch int, seq int32) []byte {
	now := time.Now().UnixMilli()
	var recs []byte
	for i, m := range msgs {
		r := []byte{0}
		r = binary.AppendVarint(r, 0)
		r = binary.AppendVarint(r, int64(i))
		r = append(binary.AppendVarint(r, int64(len(m.Key))), m.Key...)
		r = append(binary.AppendVarint(r, int64(len(m.Value))), m.Value...)
		r = binary.AppendVarint(r, int64(len(m.Headers)))
		for _, h := range m.Headers {
			r = append(binary.AppendVarint(r, int64(len(h.Key))), h.Key...)
			r = append(binary.AppendVarint(r, int64(len(h.Value))), h.Value...)
		}
		recs = append(append(recs, binary.AppendVarint(nil, int64(len(r)))...), r...)
	}
	body := binary.BigEndian.AppendUint16(nil, uint16(protocol.Transactional))
	body = binary.BigEndian.AppendUint32(body, uint32(len(msgs)-1))
	body = binary.BigEndian.AppendUint64(body, uint64(now))
	body = binary.BigEndian.AppendUint64(body, uint64(now))
	body = binary.BigEndian.AppendUint64(body, uint64(pid))
	body = binary.BigEndian.AppendUint16(body, uint16(epoch))
	body = binary.BigEndian.AppendUint32(body, uint32(seq))
	body = binary.BigEndian.AppendUint32(body, uint32(len(msgs)))
	body = append(body, recs...)
	b := binary.BigEndian.AppendUint32(nil, uint32(8+4+4+1+4+len(body))) // the record set's size
	b = binary.BigEndian.AppendUint64(b, 0)                              // base offset
	b = binary.BigEndian.AppendUint32(b, uint32(4+1+4+len(body)))        // batch length
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)                     // partition leader epoch
	b = append(b, 2)                                                     // magic
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return append(b, body...)
}

// kfEvents are n native outbox records named prefix-0 … prefix-(n-1),
// each its own aggregate; ids are their event ids.
func kfEvents(prefix string, n int) (msgs []kafka.Message, ids []string) {
	for i := range n {
		id := uuid.NewString()
		name := fmt.Sprintf("%s-%d", prefix, i)
		msgs = append(msgs, kafka.Message{Key: []byte(name), Value: []byte(`{"name":"` + name + `"}`), Headers: []kafka.Header{
			{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte("order.updated")},
			{Key: "schema_version", Value: []byte("1")}, {Key: "aggregate_type", Value: []byte("order")},
			{Key: "aggregate_version", Value: []byte("1")},
		}})
		ids = append(ids, id)
	}
	return msgs, ids
}

// TestInboxReadCommitted: the inbox over a topic written in Kafka
// transactions, as the relay's exactly-once mode will write it. Committed
// transactions, an aborted one whose events a later transaction commits
// again (a retry), plain records written while a transaction is open, and
// a producer that dies mid-transaction and is fenced (its successor's
// InitProducerId aborts it). The inbox applies exactly the committed and
// plain events, each once: no duplicate absorbed (it never saw the aborted
// copies), nothing dead-lettered (it never saw a marker).
func TestInboxReadCommitted(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	topic := kfTopic(t, ctx, "inbox")
	tid := "it-kf-inbox-" + randSuffix()
	var want []string
	p := newKfProducer(t, ctx, tid, topic)

	tx1, ids := kfEvents("tx1", 20)
	p.send(t, ctx, tx1)
	p.end(t, ctx, true)
	want = append(want, ids...)

	tx2, ids := kfEvents("tx2", 20)
	p.send(t, ctx, tx2[:10])
	p.send(t, ctx, tx2[10:])
	p.end(t, ctx, false)
	p.send(t, ctx, tx2) // the retry commits the same events
	p.end(t, ctx, true)
	want = append(want, ids...)

	tx4, ids := kfEvents("tx4", 10)
	p.send(t, ctx, tx4)
	want = append(want, ids...)
	plain, ids := kfEvents("plain", 5)
	w := &kafka.Writer{Addr: kafka.TCP(kafkaBrokers...), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	if err := w.WriteMessages(ctx, plain...); err != nil {
		t.Fatalf("plain produce: %v", err)
	}
	w.Close()
	want = append(want, ids...)
	p.end(t, ctx, true)

	dead, _ := kfEvents("fenced", 10)
	p.send(t, ctx, dead) // and the producer "crashes"
	p = newKfProducer(t, ctx, tid, topic)
	tx6, ids := kfEvents("tx6", 10)
	p.send(t, ctx, tx6)
	p.end(t, ctx, true)
	want = append(want, ids...)
	slices.Sort(want)

	st, got := kfRunInbox(t, ctx, topic, false, len(want))
	if !slices.Equal(got, want) {
		t.Errorf("applied %d events, want %d: the committed and plain ones, none of the aborted or fenced", len(got), len(want))
	}
	if st.Applied != int64(len(want)) || st.Duplicates != 0 || st.DeadLettered != 0 || st.Parked != 0 {
		t.Errorf("stats %+v: want %d applied, no duplicate (aborted copies), no dead letter (markers), none parked", st, len(want))
	}
	// read_uncommitted (TuneReader's choice) applies the aborted and the
	// fenced events too; the markers stay hidden.
	st, got = kfRunInbox(t, ctx, topic, true, len(want)+10)
	if st.Applied != int64(len(want))+10 || st.Duplicates != 20 || st.DeadLettered != 0 || len(got) != len(want)+10 {
		t.Errorf("read_uncommitted: stats %+v, %d events: want %d applied (the fenced 10 too), 20 duplicates (the aborted copies first), no dead letter",
			st, len(got), len(want)+10)
	}
}

// kfRunInbox runs an inbox consumer of its own over topic until it handled
// n events (and 2 s more), and returns its stats and the ids of the events
// it applied, sorted; an event applied twice fails the test.
func kfRunInbox(t *testing.T, ctx context.Context, topic string, readUncommitted bool, n int) (inbox.Stats, []string) {
	t.Helper()
	var mu sync.Mutex
	applied := map[string]int{}
	schema := "inbox_kf_" + randSuffix()
	pool := ibPool(t, ctx, 4)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	c, err := inbox.New(inbox.Config{
		Name: "kf-" + randSuffix(), Brokers: kafkaBrokers, Topics: []string{topic}, Pool: pool, Schema: schema,
		Handler: func(_ context.Context, _ pgx.Tx, ev *record.Event) error {
			mu.Lock()
			applied[ev.ID]++
			mu.Unlock()
			return nil
		},
		TuneReader: func(rc *kafka.ReaderConfig) {
			ibFastGroup(rc)
			if readUncommitted {
				rc.IsolationLevel = kafka.ReadUncommitted
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	name := "inbox (read_committed)"
	if readUncommitted {
		name = "inbox (read_uncommitted)"
	}
	run := ibStart(t, ctx, name, c)
	if !within(60*time.Second, 50*time.Millisecond, func() bool { return ibHandled(c.Stats()) >= int64(n) }) {
		t.Fatalf("%s handled %+v within 60s, want %d events", name, c.Stats(), n)
	}
	time.Sleep(2 * time.Second) // wall-clock: a negative window: anything more would arrive now
	run.stop(t)
	mu.Lock()
	defer mu.Unlock()
	ids := make([]string, 0, len(applied))
	for id, k := range applied {
		ids = append(ids, id)
		if k != 1 {
			t.Errorf("%s: event %s applied %d times", name, id, k)
		}
	}
	slices.Sort(ids)
	return c.Stats(), ids
}

// TestKafkaFetchOverSASLSSL: the reader's transport is built from the
// inbox's kafka.Dialer, so it reads from a broker whose only listener is
// SASL_SSL with client certificates (the secure stack of TestSecurity),
// and a wrong password is an error FetchMessage returns, not a retry
// loop that never ends.
func TestKafkaFetchOverSASLSSL(t *testing.T) {
	inSuites(t, parallel, stack)
	pki := newSecurePKI(t)
	k := startSecureKafka(t, pki)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := k.security(t, "SCRAM-SHA-512")
	topic := "it.kf.secure." + randSuffix()
	res, err := k.client(s).CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: 1, ReplicationFactor: 1}}})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic: %v", err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(k.Addr), Topic: topic, RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond,
		Transport: s.Transport("outbox-relay-it", 5*time.Second, time.Second)}
	msgs := make([]kafka.Message, 50)
	for i := range msgs {
		msgs[i] = kafka.Message{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("v%d", i))}
	}
	for {
		err := w.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if !errors.Is(err, kafka.UnknownTopicOrPartition) && !errors.Is(err, kafka.LeaderNotAvailable) || ctx.Err() != nil {
			t.Fatalf("produce over SASL_SSL: %v", err)
		}
		// wall-clock: retry interval until the topic is ready (ctx bounds it)
		time.Sleep(200 * time.Millisecond)
	}
	w.Close()

	r, err := kafkafetch.New(kafkafetch.Config{Brokers: []string{k.Addr}, Topic: topic, Offset: kafka.FirstOffset,
		Dialer: s.Dialer("outbox-relay-it", 5*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := range msgs {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			t.Fatalf("FetchMessage %d over SASL_SSL: %v", i, err)
		}
		if m.Offset != int64(i) || string(m.Key) != string(msgs[i].Key) || string(m.Value) != string(msgs[i].Value) {
			t.Fatalf("message %d: offset %d key %q value %q", i, m.Offset, m.Key, m.Value)
		}
	}
	t.Logf("read %d records over SASL_SSL (SCRAM-SHA-512, client certificate)", len(msgs))

	bad, err := kafkaconn.Config{
		TLS:  kafkaconn.TLSConfig{CAFile: pki.CA, CertFile: pki.KafkaClientCert, KeyFile: pki.KafkaClientKey},
		SASL: kafkaconn.SASLConfig{Mechanism: "SCRAM-SHA-512", Username: k.User, Password: "wrong"},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := kafkafetch.New(kafkafetch.Config{Brokers: []string{k.Addr}, Topic: topic, Dialer: bad.Dialer("outbox-relay-it", 5*time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer rb.Close()
	bctx, bcancel := context.WithTimeout(ctx, 30*time.Second)
	defer bcancel()
	_, err = rb.FetchMessage(bctx)
	if kafkaconn.Classify(err) != kafkaconn.FailureSASLAuthentication {
		t.Fatalf("FetchMessage with a wrong password: %v, want a SASL authentication failure", err)
	}
	t.Logf("a wrong password: %v", err)
}
