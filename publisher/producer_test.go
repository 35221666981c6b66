package publisher

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// idempotentBroker stores produce requests the way a Kafka partition
// leader does with idempotence: per producer id and partition it keeps
// the last batch's sequence numbers, acknowledges a repeat of that batch
// without storing it again, and refuses a batch that does not follow it
// (OUT_OF_ORDER_SEQUENCE_NUMBER) or whose id it does not know
// (UNKNOWN_PRODUCER_ID). A batch without a producer id is always stored.
type idempotentBroker struct {
	mu     sync.Mutex
	nextID int64
	inits  int
	state  map[idemKey]idemState
	log    map[int32][]string // per partition: the stored records' event ids
	// fault, if set, is asked before each batch is handled: a non-zero
	// code answers the batch with it (nothing stored); timeout stores the
	// batch and then answers the whole request with a timeout, as when
	// the leader wrote it but the answer never came.
	fault func(partition int32, st kafkaproduce.Stamp) (code kafka.Error, timeout bool)
}

type idemKey struct {
	id        int64
	partition int32
}

type idemState struct{ base, next int32 }

func newIdempotentBroker() *idempotentBroker {
	return &idempotentBroker{nextID: 1000, state: map[idemKey]idemState{}, log: map[int32][]string{}}
}

func (b *idempotentBroker) RoundTrip(ctx context.Context, _ net.Addr, msg protocol.Message) (protocol.Message, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if msg.ApiKey() == protocol.InitProducerId { // kafkaconn's own request type
		b.inits++
		b.nextID++
		return &initproducerid.Response{ProducerID: b.nextID}, nil
	}
	if req, ok := msg.(*rawproduce.Request); ok {
		res := &produceapi.Response{}
		timedOut := false
		for _, t := range req.Topics {
			rt := produceapi.ResponseTopic{Topic: t.Topic}
			for _, p := range t.Partitions {
				raw, err := readAll(p.RecordSet)
				if err != nil {
					return nil, err
				}
				code, timeout := b.produce(p.Partition, raw)
				timedOut = timedOut || timeout
				rt.Partitions = append(rt.Partitions, produceapi.ResponsePartition{Partition: p.Partition, ErrorCode: int16(code)})
			}
			res.Topics = append(res.Topics, rt)
		}
		if timedOut {
			return nil, context.DeadlineExceeded
		}
		return res, nil
	}
	return nil, fmt.Errorf("unexpected request %T", msg)
}

func readAll(rs protocol.RawRecordSet) ([]byte, error) {
	var buf bytesBuffer
	_, err := rs.WriteTo(&buf)
	return buf, err
}

type bytesBuffer []byte

func (b *bytesBuffer) Write(p []byte) (int, error) { *b = append(*b, p...); return len(p), nil }

// produce handles one partition's batch under b.mu.
func (b *idempotentBroker) produce(partition int32, raw []byte) (kafka.Error, bool) {
	d, err := kafkaproduce.DecodeBatch(raw)
	if err != nil {
		panic(err) // the publisher's batches always decode (TestAppendBatchStamp)
	}
	st := d.Stamp
	timeout := false
	if b.fault != nil {
		var code kafka.Error
		if code, timeout = b.fault(partition, st); code != 0 {
			return code, false
		}
	}
	if st.ID >= 0 {
		k := idemKey{st.ID, partition}
		s, known := b.state[k]
		switch {
		case known && st.BaseSeq == s.base:
			return 0, timeout // a repeat of the last batch: acknowledged, not stored
		case known && st.BaseSeq != s.next, !known && st.BaseSeq != 0:
			if !known {
				return kafka.UnknownProducerId, false
			}
			return kafka.OutOfOrderSequenceNumber, false
		}
		b.state[k] = idemState{base: st.BaseSeq, next: kafkaproduce.NextSeq(st.BaseSeq, len(d.Messages))}
	}
	for _, m := range d.Messages {
		b.log[partition] = append(b.log[partition], string(m.Key)+"/"+headerValue(m.Headers, "event_id"))
	}
	return 0, timeout
}

func (b *idempotentBroker) stored() (all []string, perPartition map[int32][]string, inits int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	perPartition = map[int32][]string{}
	for p, l := range b.log {
		perPartition[p] = append([]string(nil), l...)
		all = append(all, l...)
	}
	return all, perPartition, b.inits
}

func headerValue(hs []kafka.Header, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// publishAll publishes n events of aggregates agg-0..agg-(aggs-1) on a
// 3-partition topic and waits for all acknowledgements.
func publishAll(t *testing.T, cfg config, b *idempotentBroker, n, aggs int) {
	t.Helper()
	c := newFakeCluster(b)
	c.setPartitions("orders", 3)
	p, _ := startPublisher(t, cfg, slog.New(slog.DiscardHandler), c)
	var acks ackLog
	for i := range n {
		id := fmt.Sprintf("e-%05d", i)
		if err := p.Publish(context.Background(), testEvent("orders", fmt.Sprintf("agg-%d", i%aggs), id), acks.acker(id)); err != nil {
			t.Fatal(err)
		}
		if i%50 == 49 {
			acks.waitFor(t, i+1, 10*time.Second) // several batches per partition
		}
	}
	acks.waitFor(t, n, 10*time.Second)
	select {
	case err := <-p.Fatal():
		t.Fatalf("publisher failed: %v", err)
	default:
	}
}

// checkStored reports duplicates among the stored records and fails on a
// missing one or an aggregate out of order.
func checkStored(t *testing.T, b *idempotentBroker, n int) (duplicates int) {
	t.Helper()
	all, perPartition, _ := b.stored()
	seen := map[string]int{}
	for _, r := range all {
		seen[r]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct events stored, want %d", len(seen), n)
	}
	for part, l := range perPartition {
		last := map[string]string{}
		for _, r := range l {
			agg, id := splitRecord(r)
			if prev, ok := last[agg]; ok && id < prev && seen[r] == 1 {
				t.Fatalf("partition %d: %s stored after %s of the same aggregate", part, id, prev)
			}
			last[agg] = id
		}
	}
	return len(all) - n
}

func splitRecord(r string) (agg, id string) {
	for i := range r {
		if r[i] == '/' {
			return r[:i], r[i+1:]
		}
	}
	return r, ""
}

// TestIdempotentRetryIsStoredOnce: the classic duplicate, a produce
// request that times out after the leader stored it, is retried; with
// idempotence the broker recognises the retry, without it the batch is
// stored twice (so the test can fail).
func TestIdempotentRetryIsStoredOnce(t *testing.T) {
	const n = 600
	for _, idempotent := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%t", idempotent), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newIdempotentBroker()
				var count int
				b.fault = func(int32, kafkaproduce.Stamp) (kafka.Error, bool) {
					count++
					return 0, count%7 == 3 // every 7th batch is stored but not answered
				}
				publishAll(t, config{Idempotent: idempotent}, b, n, 17)
				dups := checkStored(t, b, n)
				t.Logf("duplicates: %d", dups)
				if idempotent && dups != 0 {
					t.Fatalf("%d duplicates stored with idempotence", dups)
				}
				if !idempotent && dups == 0 {
					t.Fatal("no duplicate without idempotence: the fault did not happen")
				}
			})
		})
	}
}

// TestProducerIDRefused: when the broker forgets the producer id
// (UNKNOWN_PRODUCER_ID), refuses its epoch or finds a batch out of
// sequence, the publisher takes a new id and re-sends the batch: nothing
// is lost, no aggregate is reordered, and the publisher keeps running.
func TestProducerIDRefused(t *testing.T) {
	for _, code := range []kafka.Error{kafka.UnknownProducerId, kafka.InvalidProducerEpoch, kafka.OutOfOrderSequenceNumber} {
		t.Run(codeReason(code), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newIdempotentBroker()
				var count int
				b.fault = func(int32, kafkaproduce.Stamp) (kafka.Error, bool) {
					count++
					if count == 20 || count == 40 {
						return code, false
					}
					return 0, false
				}
				publishAll(t, config{Idempotent: true}, b, 600, 17)
				if dups := checkStored(t, b, 600); dups != 0 {
					t.Fatalf("%d duplicates", dups)
				}
				// Two refusals of the same id (lanes that sent under it
				// at once) take one new id.
				if _, _, inits := b.stored(); inits < 2 {
					t.Fatalf("%d InitProducerId requests, want a new id after the refusal", inits)
				}
			})
		})
	}
}

// TestProducerStateExpired: the broker forgets every producer id midway,
// so the next batch of each partition is refused as UNKNOWN_PRODUCER_ID;
// the publisher continues under a new id with every partition at 0.
func TestProducerStateExpired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newIdempotentBroker()
		var count int
		b.fault = func(int32, kafkaproduce.Stamp) (kafka.Error, bool) {
			count++
			if count == 30 {
				clear(b.state) // under b.mu
			}
			return 0, false
		}
		publishAll(t, config{Idempotent: true}, b, 600, 17)
		if dups := checkStored(t, b, 600); dups != 0 {
			t.Fatalf("%d duplicates", dups)
		}
		if _, _, inits := b.stored(); inits < 2 {
			t.Fatalf("%d InitProducerId requests, want a second one after the state expired", inits)
		}
	})
}

// TestDuplicateSequenceNumberIsAcknowledged: older brokers answer a
// repeated batch with DUPLICATE_SEQUENCE_NUMBER; it was stored, so the
// publisher acknowledges it instead of retrying for ever.
func TestDuplicateSequenceNumberIsAcknowledged(t *testing.T) {
	b := newIdempotentBroker()
	var count int
	b.fault = func(int32, kafkaproduce.Stamp) (kafka.Error, bool) {
		count++
		if count%5 == 0 {
			return kafka.DuplicateSequenceNumber, false
		}
		return 0, false
	}
	// The batches answered DUPLICATE_SEQUENCE_NUMBER are not stored by
	// this fake, so only the acknowledgements are checked here.
	c := newFakeCluster(b)
	c.setPartitions("orders", 3)
	p, _ := startPublisher(t, config{Idempotent: true}, slog.New(slog.DiscardHandler), c)
	var acks ackLog
	for i := range 100 {
		id := fmt.Sprint(i)
		if err := p.Publish(context.Background(), testEvent("orders", "agg-"+id, id), acks.acker(id)); err != nil {
			t.Fatal(err)
		}
	}
	acks.waitFor(t, 100, 10*time.Second)
}

// TestRetryDelayWhileLeaderMoves: a leader change is retried within
// healRetry, not after the exponential backoff has grown to
// BackoffMax; a failure that outlasts healWindow, or any other failure,
// backs off as usual.
func TestRetryDelayWhileLeaderMoves(t *testing.T) {
	cfg := config{Config: Config{BackoffBase: 100 * time.Millisecond, BackoffMax: 10 * time.Second}}
	p := &Publisher{cfg: cfg}
	now := time.Now()
	var long, other time.Duration
	for range 200 {
		for _, err := range []error{kafka.NotLeaderForPartition, context.DeadlineExceeded, &net.OpError{Op: "dial", Err: fmt.Errorf("refused")}, kafka.NotEnoughReplicas} {
			if d := p.beforeRetry(12, err, now); d > healRetry {
				t.Fatalf("%v: delay %s while the leader moves, want at most %s", err, d, healRetry)
			}
		}
		long = max(long, p.beforeRetry(12, kafka.NotLeaderForPartition, now.Add(-healWindow)))
		other = max(other, p.beforeRetry(12, kafka.PolicyViolation, now))
	}
	if long <= time.Second || other <= time.Second {
		t.Fatalf("longest delays %s (past healWindow) and %s (other failure), want the exponential backoff", long, other)
	}
}

// TestRetryDelayAfterCancelledVerification: a transactional batch whose
// partition leader's check with the coordinator (KIP-890) was cancelled
// by a later request of the same transactional id is retried within
// milliseconds, like CONCURRENT_TRANSACTIONS; before, it got the
// backoff of a replica outage (about 100 ms at the first retry), which
// with --linger 0 made p50 at 1,000 events/s 105 ms. A real
// NOT_ENOUGH_REPLICAS still backs off.
func TestRetryDelayAfterCancelledVerification(t *testing.T) {
	p := &Publisher{cfg: config{Config: Config{BackoffBase: 100 * time.Millisecond, BackoffMax: 10 * time.Second}}}
	cancelled := fmt.Errorf("%w: %s", kafka.NotEnoughReplicas, "Unable to verify the partition has been added to the transaction. Underlying error: NETWORK_EXCEPTION")
	since := time.Now().Add(-time.Minute) // past healWindow
	for range 100 {
		if d := p.beforeRetry(1, cancelled, since); d > concurrentTxnRetry {
			t.Fatalf("cancelled verification: first retry after %s, want at most %s", d, concurrentTxnRetry)
		}
		if d := p.beforeRetry(12, cancelled, since); d > concurrentTxnRetryMax {
			t.Fatalf("cancelled verification: twelfth retry after %s, want at most %s", d, concurrentTxnRetryMax)
		}
	}
	var outage time.Duration
	for range 100 {
		outage = max(outage, p.beforeRetry(12, fmt.Errorf("%w: %s", kafka.NotEnoughReplicas, "in-sync replicas below min.insync.replicas"), since))
	}
	if outage <= time.Second {
		t.Fatalf("NOT_ENOUGH_REPLICAS of an outage: longest delay %s, want the exponential backoff", outage)
	}
}
