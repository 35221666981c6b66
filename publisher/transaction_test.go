package publisher

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/addpartitionstotxn"
	"github.com/segmentio/kafka-go/protocol/endtxn"
	"github.com/segmentio/kafka-go/protocol/initproducerid"
	produceapi "github.com/segmentio/kafka-go/protocol/produce"
	"github.com/segmentio/kafka-go/protocol/rawproduce"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/replication"
)

// txnBroker is a transaction coordinator and partition leader in one:
// it keeps the records of the open transaction apart and makes them
// visible at a committing EndTxn, checks that every transactional batch's
// partition was added to the transaction first, and refuses an old epoch
// (fencing). Produce requests go on to an idempotentBroker, which checks
// the sequence numbers.
type txnBroker struct {
	*idempotentBroker
	mu      sync.Mutex
	epoch   int16
	added   map[kafkaproduce.TopicPartition]bool
	pending []string // records of the open transaction, "topic/key/event_id"
	visible []string // committed records, in commit order
	ops     []string // the requests, in order: "init", "add", "produce", "commit"
	// blockEnd, if set, is received from before an EndTxn is answered.
	blockEnd chan struct{}
	// fence makes the next EndTxn fail as from a newer producer.
	fence bool
	// other keeps the sequence state of topics other than "orders".
	other map[string]*idempotentBroker
	// stall leaves produce requests unanswered until their context ends.
	stall bool
	// refuse is a topic AddPartitionsToTxn refuses (TOPIC_AUTHORIZATION_FAILED),
	// answering the request's other partitions OPERATION_NOT_ATTEMPTED
	// and adding none, as Kafka does.
	refuse string
	// timeout, if set, is the coordinator's transaction timeout: the
	// first AddPartitionsToTxn, EndTxn or produce request after it since
	// the transaction's first AddPartitionsToTxn finds the transaction
	// aborted and the epoch bumped, as Kafka's coordinator does to a
	// transaction left open that long, and is refused as fenced.
	timeout time.Duration
	// began is when the open transaction's first partition was added.
	began time.Time
}

// expire aborts the open transaction when it outlived timeout and bumps
// the epoch (b.mu held), and reports whether epoch is refused.
func (b *txnBroker) expire(epoch int16) bool {
	if b.timeout > 0 && !b.began.IsZero() && time.Since(b.began) >= b.timeout {
		b.pending, b.began = nil, time.Time{}
		clear(b.added)
		b.epoch++
		b.ops = append(b.ops, "timeout")
	}
	return b.timeout > 0 && epoch != b.epoch
}

func newTxnBroker() *txnBroker {
	return &txnBroker{idempotentBroker: newIdempotentBroker(), added: map[kafkaproduce.TopicPartition]bool{}, other: map[string]*idempotentBroker{}}
}

func (b *txnBroker) RoundTrip(ctx context.Context, addr net.Addr, msg protocol.Message) (protocol.Message, error) {
	switch req := msg.(type) {
	case *initproducerid.Request:
		b.mu.Lock()
		defer b.mu.Unlock()
		b.epoch++
		b.ops = append(b.ops, "init")
		return &initproducerid.Response{ProducerID: 7, ProducerEpoch: b.epoch}, nil
	case *addpartitionstotxn.Request:
		b.mu.Lock()
		defer b.mu.Unlock()
		res := &addpartitionstotxn.Response{}
		fenced := b.expire(req.ProducerEpoch)
		if len(b.added) == 0 && !fenced {
			b.began = time.Now()
		}
		refused := slices.ContainsFunc(req.Topics, func(t addpartitionstotxn.RequestTopic) bool { return t.Name == b.refuse })
		for _, t := range req.Topics {
			rr := addpartitionstotxn.ResponseResult{Name: t.Name}
			for _, p := range t.Partitions {
				var code int16
				switch {
				case fenced:
					code = int16(kafka.ProducerFenced)
				case t.Name == b.refuse:
					code = int16(kafka.TopicAuthorizationFailed)
				case refused:
					code = int16(kafkaproduce.ErrOperationNotAttempted)
				default:
					b.added[kafkaproduce.TopicPartition{Topic: t.Name, Partition: int(p)}] = true
				}
				rr.Results = append(rr.Results, addpartitionstotxn.ResponsePartition{PartitionIndex: p, ErrorCode: code})
			}
			res.Results = append(res.Results, rr)
		}
		b.ops = append(b.ops, "add")
		return res, nil
	case *endtxn.Request:
		if b.blockEnd != nil {
			select {
			case <-b.blockEnd:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.expire(req.ProducerEpoch) || b.fence || req.ProducerEpoch != b.epoch {
			return &endtxn.Response{ErrorCode: int16(kafka.ProducerFenced)}, nil
		}
		b.began = time.Time{}
		if req.Committed {
			b.visible = append(b.visible, b.pending...)
			b.ops = append(b.ops, "commit")
		} else {
			b.ops = append(b.ops, "abort")
		}
		b.pending = nil
		clear(b.added)
		return &endtxn.Response{}, nil
	case *rawproduce.Request:
		b.mu.Lock()
		stall := b.stall
		b.mu.Unlock()
		if stall {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		var raws [][]byte
		b.mu.Lock()
		for _, t := range req.Topics {
			for _, p := range t.Partitions {
				raw, err := readAll(p.RecordSet)
				if err != nil {
					b.mu.Unlock()
					return nil, err
				}
				d, err := kafkaproduce.DecodeBatch(raw)
				if err != nil {
					panic(err) // the publisher's batches always decode (TestAppendBatchStamp)
				}
				if !d.Stamp.Transactional {
					b.mu.Unlock()
					return nil, errors.New("a batch without the transactional attribute")
				}
				if b.expire(d.Stamp.Epoch) {
					b.mu.Unlock()
					return nil, kafka.InvalidProducerEpoch
				}
				if req.TransactionalID == "" || !b.added[kafkaproduce.TopicPartition{Topic: t.Topic, Partition: int(p.Partition)}] {
					b.mu.Unlock()
					return nil, fmt.Errorf("transactional produce to %s[%d] not added to the transaction (transactional id %q)", t.Topic, p.Partition, req.TransactionalID)
				}
				for _, m := range d.Messages {
					b.pending = append(b.pending, t.Topic+"/"+string(m.Key)+"/"+headerValue(m.Headers, "event_id"))
				}
				raws = append(raws, raw)
			}
		}
		i := 0 // the idempotent broker reads the record sets again
		for ti := range req.Topics {
			for pi := range req.Topics[ti].Partitions {
				req.Topics[ti].Partitions[pi].RecordSet = protocol.RawRecordSet{Reader: bytes.NewReader(raws[i])}
				i++
			}
		}
		b.ops = append(b.ops, "produce")
		b.mu.Unlock()
		// Sequence numbers are per topic and partition: a broker each.
		res := &produceapi.Response{}
		for _, topic := range req.Topics {
			ib := b.idempotentBroker
			if topic.Topic != "orders" {
				b.mu.Lock()
				if b.other[topic.Topic] == nil {
					b.other[topic.Topic] = newIdempotentBroker()
				}
				ib = b.other[topic.Topic]
				b.mu.Unlock()
			}
			one := *req
			one.Topics = []rawproduce.RequestTopic{topic}
			m, err := ib.RoundTrip(ctx, addr, &one)
			if err != nil {
				return nil, err
			}
			res.Topics = append(res.Topics, m.(*produceapi.Response).Topics...)
		}
		return res, nil
	}
	return b.idempotentBroker.RoundTrip(ctx, addr, msg)
}

// release lets one blocked EndTxn through.
func (b *txnBroker) release(t *testing.T, p *Publisher) {
	t.Helper()
	select {
	case b.blockEnd <- struct{}{}:
	case err := <-p.Fatal():
		t.Fatalf("publisher failed: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no EndTxn to release within 10s")
	}
}

func (b *txnBroker) state() (visible, pending []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.visible...), append([]string(nil), b.pending...)
}

// startTxnPublisher starts an exactly-once publisher on b with topic
// "orders" (3 partitions) and the positions topic "pos" (1 partition).
func startTxnPublisher(t *testing.T, b *txnBroker, interval time.Duration) *Publisher {
	t.Helper()
	return startTxnPublisherWith(t, b, config{Transactions: &TransactionConfig{Interval: interval}})
}

// startTxnPublisherWith is startTxnPublisher with cfg's other settings
// (DeadLetters, the transaction's Timeout); cfg.Transactions must be set,
// its ID, topic, key and Position function are filled in when empty.
func startTxnPublisherWith(t *testing.T, b *txnBroker, cfg config) *Publisher {
	t.Helper()
	c := newFakeCluster(b)
	c.setPartitions("orders", 3)
	c.setPartitions("pos", 1)
	tc := cfg.Transactions
	tc.ID, tc.PositionsTopic, tc.PositionKey = cmp.Or(tc.ID, "tid"), cmp.Or(tc.PositionsTopic, "pos"), []byte("slot")
	if tc.Position == nil {
		tc.Position = func(last *replication.WALEvent, _ int) []byte { return []byte(last.EventID) }
	}
	p, _ := startPublisher(t, cfg, slog.New(slog.DiscardHandler), c)
	if _, err := p.begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTransactionDefersAcks: an event is acknowledged only once the
// transaction holding it committed, and the transaction carries a position
// record naming its last event, produced before the commit.
func TestTransactionDefersAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTxnBroker()
		b.blockEnd = make(chan struct{})
		p := startTxnPublisher(t, b, 20*time.Millisecond)
		var acks ackLog
		for i := range 30 {
			id := fmt.Sprintf("e-%02d", i)
			if err := p.Publish(context.Background(), testEvent("orders", fmt.Sprintf("agg-%d", i%5), id), acks.acker(id)); err != nil {
				t.Fatal(err)
			}
		}
		// The commit waits in EndTxn: every record is in the open
		// transaction, none acknowledged, the position record last.
		if !within(5*time.Second, func() bool { _, pending := b.state(); return len(pending) == 31 }) {
			_, pending := b.state()
			b.mu.Lock()
			ops := append([]string(nil), b.ops...)
			b.mu.Unlock()
			t.Fatalf("%d records in the open transaction, want 30 events and the position record; requests %v", len(pending), ops)
		}
		if n := acks.n.Load(); n != 0 {
			t.Fatalf("%d events acknowledged before the commit", n)
		}
		_, pending := b.state()
		if last := pending[len(pending)-1]; last != "pos/slot/" {
			t.Fatalf("last record of the transaction %q, want the position record", last)
		}
		b.release(t, p)
		close(b.blockEnd)
		acks.waitFor(t, 30, 5*time.Second)
		visible, _ := b.state()
		if len(visible) != 31 {
			t.Fatalf("%d records visible after the commit, want 31", len(visible))
		}
	})
}

// TestTransactionHoldsLaterEvents: events published while a transaction
// commits are not sent before its EndTxn: sent earlier they would join
// the closing transaction without being covered by its position.
func TestTransactionHoldsLaterEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTxnBroker()
		b.blockEnd = make(chan struct{})
		p := startTxnPublisher(t, b, 20*time.Millisecond)
		var acks ackLog
		publish := func(from, to int) {
			for i := from; i < to; i++ {
				id := fmt.Sprintf("e-%02d", i)
				if err := p.Publish(context.Background(), testEvent("orders", fmt.Sprintf("agg-%d", i%5), id), acks.acker(id)); err != nil {
					t.Fatal(err)
				}
			}
		}
		publish(0, 10)
		if !within(5*time.Second, func() bool { _, pending := b.state(); return len(pending) == 11 }) {
			t.Fatal("the first transaction did not reach its commit")
		}
		publish(10, 20) // while EndTxn hangs
		// Virtual time: five transaction intervals, every goroutine run
		// to a standstill before the clock moves: room for the later
		// events to be sent into the closing transaction, if they could.
		time.Sleep(100 * time.Millisecond)
		if _, pending := b.state(); len(pending) != 11 {
			t.Fatalf("%d records in the closing transaction, want its 10 events and its position: later events were sent into it", len(pending))
		}
		b.release(t, p)
		acks.waitFor(t, 10, 5*time.Second)
		b.release(t, p) // the second transaction's EndTxn
		close(b.blockEnd)
		acks.waitFor(t, 20, 5*time.Second)
		visible, _ := b.state()
		if len(visible) != 22 {
			t.Fatalf("%d records visible, want 20 events and two position records", len(visible))
		}
		// Per aggregate, the acknowledgements keep the publish order.
		last := map[string]string{}
		for _, id := range acks.order() {
			var i int
			fmt.Sscanf(id, "e-%d", &i)
			agg := fmt.Sprint(i % 5)
			if prev, ok := last[agg]; ok && id < prev {
				t.Fatalf("aggregate %s: %s acknowledged after %s", agg, id, prev)
			}
			last[agg] = id
		}
	})
}

// TestTransactionFenced: an EndTxn refused because a newer producer took
// the transactional id over fails the publisher with a fenced
// TransactionError, and acknowledges nothing of the transaction.
func TestTransactionFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTxnBroker()
		b.fence = true
		p := startTxnPublisher(t, b, 10*time.Millisecond)
		var acks ackLog
		if err := p.Publish(context.Background(), testEvent("orders", "agg-1", "e-1"), acks.acker("e-1")); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-p.Fatal():
			var te *TransactionError
			if !errors.As(err, &te) || !te.Fenced || !errors.Is(err, kafka.ProducerFenced) {
				t.Fatalf("fatal error %v, want a fenced TransactionError", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no failure after a fenced EndTxn")
		}
		if n := acks.n.Load(); n != 0 {
			t.Fatalf("%d events acknowledged from a fenced transaction", n)
		}
	})
}

// TestTransactionTimeoutIsNotFencing: a transaction left open past the
// transaction timeout is aborted by the coordinator, which bumps the
// producer epoch, so the next request is refused as fenced
// (PRODUCER_FENCED). The publisher reports that as a transaction timeout
// naming the setting, not as another relay taking over.
func TestTransactionTimeoutIsNotFencing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTxnBroker()
		b.timeout = time.Minute
		// A commit interval longer than the timeout keeps the
		// transaction open past it.
		p := startTxnPublisherWith(t, b, config{Transactions: &TransactionConfig{Interval: 2 * time.Minute, Timeout: time.Minute}})
		if err := p.Publish(context.Background(), testEvent("orders", "agg-1", "e-1"), nopAck{}); err != nil {
			t.Fatal(err)
		}
		var err error
		select {
		case err = <-p.Fatal():
		case <-time.After(5 * time.Minute):
			t.Fatal("no failure after the coordinator's timeout")
		}
		var te *TransactionError
		if !errors.As(err, &te) || te.Fenced || !errors.Is(err, kafka.ProducerFenced) {
			t.Fatalf("error %v (%#v), want a TransactionError for PRODUCER_FENCED, not marked fenced", err, te)
		}
		msg := err.Error()
		if strings.Contains(msg, "another relay took over") || !strings.Contains(msg, "transaction timeout") || !strings.Contains(msg, "Publish.TransactionTimeout") {
			t.Fatalf("error %q: want it to name the transaction timeout and Publish.TransactionTimeout, not another relay", msg)
		}
	})
}

// TestTransactionFailureAfterTimeout: an epoch refusal is a timeout once
// the open transaction is as old as the transaction timeout, fencing
// before; other refusals keep their class.
func TestTransactionFailureAfterTimeout(t *testing.T) {
	tx := &transactions{cfg: TransactionConfig{Timeout: time.Minute}}
	for _, c := range []struct {
		age           time.Duration // 0: no partition added yet
		err           error
		fenced, timed bool
	}{
		{2 * time.Minute, kafka.ProducerFenced, false, true},
		{time.Minute, fmt.Errorf("wrapped: %w", kafka.InvalidProducerEpoch), false, true},
		{59 * time.Second, kafka.ProducerFenced, true, false},
		{0, kafka.ProducerFenced, true, false},
		{2 * time.Minute, kafka.InvalidTransactionState, false, false},
	} {
		tx.began = time.Time{}
		if c.age > 0 {
			tx.began = time.Now().Add(-c.age)
		}
		te := tx.failure("EndTxn(commit)", c.err)
		if te == nil || te.Fenced != c.fenced || te.TimedOut != c.timed {
			t.Errorf("%v after %s: got %+v, want fenced=%v timed out=%v", c.err, c.age, te, c.fenced, c.timed)
			continue
		}
		if c.timed && (te.Timeout != time.Minute || te.Open < c.age || !errors.Is(te, c.err) && !errors.Is(te, kafka.InvalidProducerEpoch)) {
			t.Errorf("%v after %s: got %+v", c.err, c.age, te)
		}
	}
}

// TestAddPartitionsRefusalStaysWithItsTopic: AddPartitionsToTxn refuses
// one topic of a combined request (TOPIC_AUTHORIZATION_FAILED) and Kafka
// answers the other partitions OPERATION_NOT_ATTEMPTED: only the refused
// topic's batch fails for good (its events are dead-lettered); the
// others are retried, and added once the request leaves that topic out.
func TestAddPartitionsRefusalStaysWithItsTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTxnBroker()
		b.refuse = "secret"
		p := startTxnPublisher(t, b, time.Hour)
		bs := []*kafkaproduce.Batch{{Topic: "orders", Partition: 0}, {Topic: "secret", Partition: 0}, {Topic: "orders", Partition: 1}}
		errs := p.txn.addPartitions(context.Background(), bs)
		if len(errs) != len(bs) {
			t.Fatalf("answers %v, want one per batch", errs)
		}
		for i, want := range []Class{Transient, Permanent, Transient} {
			if c, reason := classify(errs[i]); c != want {
				t.Errorf("batch %s[%d]: %v classified %s (%s), want %s", bs[i].Topic, bs[i].Partition, errs[i], c, reason, want)
			}
		}
		if _, reason := classify(errs[0]); reason != "operation_not_attempted" {
			t.Errorf("reason %q, want operation_not_attempted", reason)
		}
		if errs := p.txn.addPartitions(context.Background(), []*kafkaproduce.Batch{bs[0], bs[2]}); errs != nil {
			t.Fatalf("without the refused topic: %v", errs)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if !b.added[kafkaproduce.TopicPartition{Topic: "orders", Partition: 0}] || !b.added[kafkaproduce.TopicPartition{Topic: "orders", Partition: 1}] || b.added[kafkaproduce.TopicPartition{Topic: "secret", Partition: 0}] {
			t.Fatalf("partitions in the transaction: %v", b.added)
		}
	})
}

// TestCloseAbortsUnlessAProduceIsUnanswered: Close aborts the open
// transaction (EndTxn abort) when every produce request was answered, and
// sends no abort when one was cut off unanswered: under the same epoch the
// late batch could open a transaction nobody ends on a broker without
// KIP-890; the next InitProducerId aborts with a bumped epoch instead.
func TestCloseAbortsUnlessAProduceIsUnanswered(t *testing.T) {
	for _, stall := range []bool{false, true} {
		t.Run(fmt.Sprintf("stall=%v", stall), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newTxnBroker()
				b.stall = stall
				p := startTxnPublisher(t, b, time.Hour)
				var acks ackLog
				if err := p.Publish(context.Background(), testEvent("orders", "agg-1", "e-1"), acks.acker("e-1")); err != nil {
					t.Fatal(err)
				}
				// Answered: the record is in the open transaction. Stalled:
				// the request waits for its context (virtual time passes
				// only once every goroutine is blocked).
				if !within(5*time.Second, func() bool {
					b.mu.Lock()
					defer b.mu.Unlock()
					return len(b.pending) == 1 || stall && slices.Contains(b.ops, "add")
				}) {
					t.Fatal("the event was not produced")
				}
				synctest.Wait()
				p.Close()
				b.mu.Lock()
				aborted := slices.Contains(b.ops, "abort")
				ops := slices.Clone(b.ops)
				b.mu.Unlock()
				if aborted == stall {
					t.Fatalf("stall=%v: requests %v; want an abort only when every produce was answered", stall, ops)
				}
			})
		})
	}
}

// TestTransactionFailureClasses: which refusals lose the transaction.
func TestTransactionFailureClasses(t *testing.T) {
	for _, c := range []struct {
		err    error
		lost   bool
		fenced bool
	}{
		{kafka.InvalidProducerEpoch, true, true},
		{kafka.ProducerFenced, true, true},
		{fmt.Errorf("wrapped: %w", kafka.OutOfOrderSequenceNumber), true, false},
		{kafka.InvalidTransactionState, true, false},
		{kafka.NotLeaderForPartition, false, false},
		{kafka.ConcurrentTransactions, false, false},
		{context.DeadlineExceeded, false, false},
	} {
		te := transactionFailure("Produce", c.err)
		if (te != nil) != c.lost || te != nil && te.Fenced != c.fenced {
			t.Errorf("%v: got %+v, want lost=%v fenced=%v", c.err, te, c.lost, c.fenced)
		}
	}
	if !coordinatorRetry(kafka.ConcurrentTransactions) || !coordinatorRetry(kafka.NotCoordinatorForGroup) || coordinatorRetry(kafka.InvalidProducerEpoch) {
		t.Error("coordinatorRetry misclassifies")
	}
}

// within polls cond for up to d and reports whether it held; in a synctest
// bubble the poll interval (5ms) and d are virtual time.
func within(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
