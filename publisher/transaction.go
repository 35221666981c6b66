package publisher

// This file holds the exactly-once mode (Config.Transactions): the
// publisher writes in Kafka transactions, each covering a contiguous
// range of events in stream order, and adds to each a position record
// naming the range's last event. Records and position become visible to
// read_committed consumers together, at EndTxn, or never.
//
// A range is what Publish handed over since the last commit. Its events
// go through the routers and lanes as in at-least-once mode, stamped
// transactional; their Ackers are deferred (rangeAck) until the range's
// EndTxn succeeds, so the caller's tracker, and with it the slot, never
// passes an event that an abort could still take back. The committer
// goroutine (transactions.run, counted in Publisher.wg) closes the open
// range after Interval, or once it holds MaxEvents or MaxBytes, waits
// until every event of it is stored in the Kafka transaction or settled
// in PostgreSQL (parked, dead-lettered), then writes the position record
// and commits. Events published meanwhile form the next range: they are
// held back (not enqueued) until the commit ends, because a record sent
// before EndTxn would join the closing transaction without its position.
//
// Publish never blocks on a commit: the replication goroutine keeps
// answering the server while the committer waits for Kafka.
//
// Failures that take the transaction back (the producer fenced by a newer
// one with the same transactional id, the coordinator's abort after
// Timeout, a sequence or epoch the broker refuses) fail the publisher
// with a *TransactionError: nothing of the open transaction will become
// visible, and the caller restarts from the last committed position. The
// lanes never renew the producer id in this mode: a new epoch would abort
// the open transaction behind their back.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TransactionConfig turns on exactly-once writes (Config.Transactions).
type TransactionConfig struct {
	// ID is the transactional id. Every publisher of the same source
	// must use the same one: Begin's InitProducerId then fences the
	// previous holder, whose open transaction the coordinator aborts and
	// whose later requests it refuses.
	ID string
	// Interval is how long a range collects events before its
	// transaction commits.
	Interval time.Duration
	// Timeout is the transaction timeout asked for at InitProducerId:
	// the coordinator aborts a transaction left open this long.
	Timeout time.Duration
	// MaxEvents and MaxBytes commit a range early once it holds this
	// many events or bytes. Its Ackers are called only at the commit, so
	// keep them under the caller's own bound of unacknowledged events
	// (half of it lets the next range fill while one commits).
	MaxEvents int
	MaxBytes  int
	// PositionsTopic receives each transaction's position record, keyed
	// by PositionKey: the same for every range of the source, so a
	// compacted topic keeps the newest.
	PositionsTopic string
	PositionKey    []byte
	// Position makes the value of the position record of a range whose
	// last event is last; partitions is the positions topic's partition
	// count the record is written under (its partition is the key's among
	// them), which a reader compares with the count it sees: partitions
	// added since move the key, so newer records may be in another one.
	Position func(last *replication.Event, partitions int) []byte
}

// TransactionError is a failure of the publisher's Kafka transaction.
// Nothing the open transaction holds will become visible (the
// coordinator aborts it, now or at its timeout, or the next
// InitProducerId does), and none of its events were acknowledged: the
// caller restarts from the last committed position.
type TransactionError struct {
	// Op is the step that failed: InitProducerId, AddPartitionsToTxn,
	// Produce, EndTxn.
	Op string
	// Fenced reports that a newer producer with the same transactional
	// id took over (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH): this
	// publisher's process is no longer the leader and must step down.
	Fenced bool
	Err    error
}

func (e *TransactionError) Error() string {
	if e.Fenced {
		return fmt.Sprintf("kafka transaction: %s: fenced by a newer producer with the same transactional id (another relay took over): %v", e.Op, e.Err)
	}
	return fmt.Sprintf("kafka transaction: %s: %v (the open transaction is aborted; restarting from the last committed position)", e.Op, e.Err)
}

func (e *TransactionError) Unwrap() error { return e.Err }

// transactionFailure returns the *TransactionError a failure of op is in
// exactly-once mode, or nil for a failure to retry. Every refusal of the
// producer's identity or of the transaction's state aborts the
// transaction: the broker will not accept a later batch or EndTxn of it.
func transactionFailure(op string, err error) *TransactionError {
	var te *TransactionError
	if errors.As(err, &te) {
		return te
	}
	switch {
	case kafkaproduce.Fenced(err):
		return &TransactionError{Op: op, Fenced: true, Err: err}
	case kafkaproduce.EndsTransaction(err):
		return &TransactionError{Op: op, Err: err}
	}
	return nil
}

// coordinatorRetry reports whether a transaction coordinator's answer
// asks to try again: it moved, is loading, or is still completing the
// previous transaction (CONCURRENT_TRANSACTIONS).
func coordinatorRetry(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kafkaproduce.CoordinatorBusy(err)
	}
	return healing(err)
}

// txnRange is a contiguous range of published events that one Kafka
// transaction covers.
type txnRange struct {
	// inflight counts its events not yet taken care of.
	inflight int
	events   int
	bytes    int
	began    time.Time
	// last is its last event in stream order: the position it commits.
	last *replication.Event
	// acks are its events' Ackers, called once the transaction commits.
	acks []deferredAck
	// waiting holds its records that reached enqueue while the previous
	// range was committing, in order.
	waiting []*outgoing
}

type deferredAck struct {
	ack   Acker
	bytes int
}

// rangeAck defers an event's Acker to its range's commit.
type rangeAck struct {
	t     *transactions
	r     *txnRange
	inner Acker
}

func (a *rangeAck) Ack(bytes int) { a.t.settled(a.r, a.inner, bytes) }

// transactions is the publisher's exactly-once state.
type transactions struct {
	p      *Publisher
	cfg    TransactionConfig
	client *kafka.Client
	// coord makes the transactional id's coordinator calls.
	coord kafkaproduce.Txn
	// positions is the partition of the position records, and its
	// sequence state; positionsCount the topic's partition count. Set by
	// begin.
	positions      topicPartition
	positionsCount int
	seq            *kafkaproduce.Seq

	mu sync.Mutex
	// open is the range whose records may be sent; next collects the
	// events published while open commits (nil otherwise).
	open, next *txnRange
	committing bool
	// drained is closed when open's last event is taken care of while
	// it commits.
	drained chan struct{}
	// releasing is set while the committer enqueues the waiting records
	// of the range it just opened: records of that range reaching
	// enqueue meanwhile queue behind them.
	releasing bool
	// added is the partitions added to the open Kafka transaction.
	added map[topicPartition]bool
	// wake tells the committer to look again: a range got its first
	// event or filled up.
	wake chan struct{}
}

func newTransactions(p *Publisher, cfg TransactionConfig) *transactions {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.MaxEvents <= 0 {
		cfg.MaxEvents = 5000
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 8 << 20
	}
	return &transactions{p: p, cfg: cfg, client: p.client, coord: kafkaproduce.Txn{Client: p.client, ID: cfg.ID, Timeout: cfg.Timeout}, open: &txnRange{}, added: map[topicPartition]bool{},
		wake: make(chan struct{}, 1)}
}

// Begin takes the transactional producer id (exactly-once mode; a no-op
// otherwise) and must succeed before the first Publish. Its
// InitProducerId fences every earlier producer of the transactional id:
// the coordinator completes or aborts the transaction such a producer
// left open, and refuses it from then on. Once Begin returns, the
// position topic's newest committed record is final, so the caller reads
// it afterwards. Begin creates the positions topic when it is missing
// (one partition, compacted).
func (p *Publisher) Begin(ctx context.Context) error {
	t := p.txn
	if t == nil {
		return nil
	}
	if err := t.ensurePositionsTopic(ctx); err != nil {
		return err
	}
	id, err := t.initProducerID(ctx)
	if err != nil {
		return err
	}
	p.producer.Adopt(id)
	p.log.Info("transactional producer ready: earlier producers of the transactional id are fenced", slog.String("stage", "transaction"),
		slog.String("transactional_id", t.cfg.ID), slog.Int64("producer_id", id.ID), slog.Int("producer_epoch", int(id.Epoch)))
	p.wg.Add(1)
	go t.run()
	return nil
}

// initProducerID asks the transaction coordinator for the transactional
// id's producer id and a new epoch, retrying while the coordinator is
// unavailable or still ending the previous holder's transaction.
func (t *transactions) initProducerID(ctx context.Context) (kafkaproduce.ProducerID, error) {
	for attempt := 1; ; attempt++ {
		pid, err := t.coord.InitProducerID(ctx)
		if err == nil {
			return pid, nil
		}
		if ctx.Err() != nil {
			return kafkaproduce.ProducerID{}, ctx.Err()
		}
		if !coordinatorRetry(err) {
			if te := transactionFailure("InitProducerId", err); te != nil {
				return kafkaproduce.ProducerID{}, te
			}
			return kafkaproduce.ProducerID{}, fmt.Errorf("InitProducerId (transactional id %q): %w", t.cfg.ID, err)
		}
		d := backoff.Jitter(attempt, 50*time.Millisecond, time.Second)
		t.p.log.Info("transaction coordinator not ready, retrying InitProducerId", slog.String("stage", "transaction"),
			slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		t.p.refreshMetadata()
		if !backoff.Sleep(ctx, d) {
			return kafkaproduce.ProducerID{}, ctx.Err()
		}
	}
}

// ensurePositionsTopic finds the position records' partition (by the
// Java client's murmur2 of the key), creating the topic when missing.
func (t *transactions) ensurePositionsTopic(ctx context.Context) error {
	key := t.cfg.PositionKey
	topic := t.cfg.PositionsTopic
	n, err := t.partitionCount(ctx, topic)
	if errors.Is(err, kafka.UnknownTopicOrPartition) {
		res, cerr := t.client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
			Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
			ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}},
		}}})
		if cerr == nil {
			cerr = res.Errors[topic]
		}
		if cerr != nil && !errors.Is(cerr, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create the positions topic %s: %w", topic, cerr)
		}
		t.p.log.Info("created the positions topic", slog.String("stage", "transaction"), slog.String("topic", topic))
		n, err = 0, nil
		for attempt := 1; n == 0 && attempt <= 50; attempt++ {
			if n, err = t.partitionCount(ctx, topic); err == nil && n > 0 {
				break
			}
			if !backoff.Sleep(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
	}
	if err != nil {
		return fmt.Errorf("positions topic %s: %w", topic, err)
	}
	if n <= 0 {
		return fmt.Errorf("positions topic %s: no partitions", topic)
	}
	t.positions, t.positionsCount = topicPartition{topic, keyPartition(key, n)}, n
	t.seq = t.p.producer.Sequence(topic, t.positions.partition)
	return nil
}

// partitionCount is topic's number of partitions.
func (t *transactions) partitionCount(ctx context.Context, topic string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := t.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil {
		return 0, err
	}
	for _, tp := range md.Topics {
		if tp.Name == topic {
			if tp.Error != nil {
				return 0, tp.Error
			}
			return len(tp.Partitions), nil
		}
	}
	return 0, kafka.UnknownTopicOrPartition
}

// PositionPartition is the partition of the positions topic that holds
// this publisher's position records (after Begin).
func (p *Publisher) PositionPartition() int {
	if p.txn == nil {
		return -1
	}
	return p.txn.positions.partition
}

// PositionPartitionOf is the partition of the positions topic that holds
// the records of key (after Begin): murmur2 of the key, as for the
// publisher's own.
func (p *Publisher) PositionPartitionOf(key []byte) int {
	if p.txn == nil || p.txn.positionsCount <= 0 {
		return -1
	}
	return keyPartition(key, p.txn.positionsCount)
}

// PositionPartitions is the number of partitions of the positions topic
// (after Begin; 0 before, or in at-least-once mode).
func (p *Publisher) PositionPartitions() int {
	if p.txn == nil {
		return 0
	}
	return p.txn.positionsCount
}

// keyPartition is the partition of key among n, by the Java client's
// murmur2, as for every record the publisher keys.
func keyPartition(key []byte, n int) int {
	parts := make([]int, n)
	for i := range parts {
		parts[i] = i
	}
	return kafka.Murmur2Balancer{}.Balance(kafka.Message{Key: key}, parts...)
}

// enter adds rec to the range being collected (the next one while the
// open one commits) and defers its Acker to that range's commit.
func (t *transactions) enter(rec *outgoing, size int) *txnRange {
	t.mu.Lock()
	r := t.open
	if t.committing {
		if t.next == nil {
			t.next = &txnRange{}
		}
		r = t.next
	}
	r.inflight++
	r.events++
	r.bytes += size
	r.last = rec.ev
	if r.began.IsZero() {
		r.began = time.Now()
	}
	rec.ack = &rangeAck{t: t, r: r, inner: rec.ack}
	wake := r == t.open && (r.events == 1 || r.events >= t.cfg.MaxEvents || r.bytes >= t.cfg.MaxBytes)
	t.mu.Unlock()
	if wake {
		select {
		case t.wake <- struct{}{}:
		default:
		}
	}
	return r
}

// defer reports whether rec must wait for its range to open (it was
// published while the previous range committed, or the committer is
// still enqueueing records published before it); it then queues it.
func (t *transactions) hold(rec *outgoing, r *txnRange) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r == t.open && !t.releasing {
		return false
	}
	r.waiting = append(r.waiting, rec)
	return true
}

// settled records that one of r's events is taken care of.
func (t *transactions) settled(r *txnRange, ack Acker, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.acks = append(r.acks, deferredAck{ack, bytes})
	r.inflight--
	if r.inflight == 0 && r == t.open && t.drained != nil {
		close(t.drained)
		t.drained = nil
	}
}

// addPartitions adds the partitions of bs that the open transaction does
// not have yet (AddPartitionsToTxn), before the batches are produced: a
// broker refuses (or, before KIP-890, would strand) a transactional
// batch for a partition the coordinator does not know is in the
// transaction. It answers per batch: nil when every partition is
// in the transaction, else one error per batch of bs. A failure of the
// whole request, or one that ends the transaction (TransactionError),
// answers every batch alike. A partition's own failure (a topic the
// relay may not write, say) answers only its batches: Kafka then adds no
// partition of the request and answers the others OPERATION_NOT_ATTEMPTED,
// and their batches get errNotAttempted, which is transient, so the
// events of other topics are retried instead of sharing the failing
// topic's fate.
func (t *transactions) addPartitions(ctx context.Context, bs []*kafkaproduce.Batch) []error {
	var missing []kafkaproduce.TopicPartition
	t.mu.Lock()
	for _, b := range bs {
		k := kafkaproduce.TopicPartition{Topic: b.Topic, Partition: b.Partition}
		if !t.added[topicPartition{b.Topic, b.Partition}] && !slices.Contains(missing, k) {
			missing = append(missing, k)
		}
	}
	t.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	all := func(err error) []error {
		errs := make([]error, len(bs))
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	failed, err := t.coord.AddPartitions(ctx, t.p.producer.ID(), missing)
	if err != nil {
		if te := transactionFailure("AddPartitionsToTxn", err); te != nil {
			return all(te)
		}
		return all(err)
	}
	for _, err := range failed {
		if te := transactionFailure("AddPartitionsToTxn", err); te != nil {
			return all(te)
		}
	}
	if len(failed) == 0 {
		t.mu.Lock()
		for _, k := range missing {
			t.added[topicPartition{k.Topic, k.Partition}] = true
		}
		t.mu.Unlock()
		return nil
	}
	errs := make([]error, len(bs))
	for i, b := range bs {
		err, ok := failed[kafkaproduce.TopicPartition{Topic: b.Topic, Partition: b.Partition}]
		if !ok || errors.Is(err, kafkaproduce.ErrOperationNotAttempted) {
			// Held back by Kafka, or in the transaction already while
			// the request is not sent for the others' sake: retried.
			errs[i] = errNotAttempted
			continue
		}
		errs[i] = fmt.Errorf("AddPartitionsToTxn %s[%d]: %w", b.Topic, b.Partition, err)
	}
	return errs
}

// errNotAttempted answers a batch whose partition Kafka did not add to
// the transaction because another partition of the same request failed
// (OPERATION_NOT_ATTEMPTED), or whose produce request was not sent for
// that reason. It is transient: the batch is retried.
var errNotAttempted = fmt.Errorf("AddPartitionsToTxn: not attempted because another partition of the request failed: %w", kafkaproduce.ErrOperationNotAttempted)

// run is the committer: it commits the open range after Interval, or
// early once it is full, until the publisher closes or a commit fails.
func (t *transactions) run() {
	p := t.p
	defer p.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		t.mu.Lock()
		r := t.open
		wait := time.Duration(-1) // nothing to commit: wait for a wake
		if r.events > 0 {
			wait = max(time.Until(r.began.Add(t.cfg.Interval)), 0)
			if r.events >= t.cfg.MaxEvents || r.bytes >= t.cfg.MaxBytes {
				wait = 0
			}
		}
		t.mu.Unlock()
		if wait == 0 {
			if err := t.commit(); err != nil {
				if p.ctx.Err() == nil {
					p.fail(err)
				}
				return
			}
			continue
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-t.wake:
		case <-tick:
		case <-p.ctx.Done():
			timer.Stop()
			return
		}
		timer.Stop()
	}
}

// commit closes the open range, waits until each of its events is taken
// care of, writes its position record, commits the Kafka transaction,
// then calls the range's Ackers and opens the next range.
func (t *transactions) commit() error {
	p := t.p
	t.mu.Lock()
	r := t.open
	t.committing = true
	drained := make(chan struct{})
	if r.inflight == 0 {
		close(drained)
	} else {
		t.drained = drained
	}
	t.mu.Unlock()
	started := time.Now()
	// The position record goes out after the range's events, not beside
	// them: two produce requests of one transactional id that reach a
	// partition leader together, each with a partition new to the
	// transaction, make it verify both with the coordinator (KIP-890),
	// and the first verification is cancelled (NOT_ENOUGH_REPLICAS,
	// "Unable to verify ... NETWORK_EXCEPTION"). Sent beside the events,
	// the record made p50 at 1,000 events/s 70 ms instead of 21 ms
	// (docs/benchmarks.md, "Issue 35").
	select {
	case <-drained:
	case <-p.ctx.Done():
		return p.ctx.Err()
	}
	if err := t.writePosition(r.last); err != nil {
		return err
	}
	if err := t.end(true); err != nil {
		return err
	}
	p.m.TransactionCommitted(time.Since(r.began), time.Since(started), r.events)

	t.mu.Lock()
	next := t.next
	if next == nil {
		next = &txnRange{}
	}
	var again []*kafkaproduce.Batch
	if next.events > 0 {
		again = t.partitionsAgain(next) // before clear: from the committed one
	}
	clear(t.added)
	t.open, t.next, t.committing, t.releasing = next, nil, false, true
	t.mu.Unlock()
	for _, a := range r.acks {
		a.ack.Ack(a.bytes)
	}
	if next.events > 0 {
		t.beginNext(again)
	}
	t.release(next)
	return nil
}

// maxPartitionsAgain bounds the partitions beginNext adds ahead of the
// next transaction's records.
const maxPartitionsAgain = 64

// partitionsAgain is the partitions of the committed transaction whose
// topics the next range's waiting records go to (t.mu held): at live
// rates consecutive transactions write mostly the same partitions, so
// adding them ahead saves the lanes' own AddPartitionsToTxn round trip
// before their first produce. A partition added but not written costs
// only its transaction marker.
func (t *transactions) partitionsAgain(next *txnRange) []*kafkaproduce.Batch {
	topics := map[string]bool{}
	for _, rec := range next.waiting {
		topics[rec.msg.Topic] = true
	}
	var bs []*kafkaproduce.Batch
	for k := range t.added {
		if k != t.positions && topics[k.topic] && len(bs) < maxPartitionsAgain {
			bs = append(bs, &kafkaproduce.Batch{Topic: k.topic, Partition: k.partition})
		}
	}
	return bs
}

// beginNext adds the positions partition, which every transaction
// writes, to the next transaction before its held events are released,
// with the partitions again (partitionsAgain) the previous one wrote.
// Right after EndTxn the coordinator is still writing the previous
// transaction's markers and answers CONCURRENT_TRANSACTIONS for a few
// milliseconds; polled here every millisecond, the wait ends as soon as
// it can, once, instead of in every lane's first request with a backoff
// each (with group commit, every transaction would pay it). Anything
// else is left to the lanes, which retry or fail as for any request;
// when one of the partitions again is refused (its topic deleted, say),
// Kafka adds none of the request, so the positions partition is added
// on its own.
func (t *transactions) beginNext(again []*kafkaproduce.Batch) {
	bs := append([]*kafkaproduce.Batch{{Topic: t.positions.topic, Partition: t.positions.partition}}, again...)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		errs := t.addPartitions(t.p.ctx, bs)
		if errs == nil {
			return
		}
		if !errors.Is(errs[0], kafka.ConcurrentTransactions) {
			if len(bs) == 1 {
				return
			}
			bs = bs[:1]
			continue
		}
		if !t.p.sleep(time.Millisecond) {
			return
		}
	}
}

// release enqueues the records of r that waited for it to open, in
// order, including those that arrive while it does.
func (t *transactions) release(r *txnRange) {
	for {
		t.mu.Lock()
		recs := r.waiting
		r.waiting = nil
		if len(recs) == 0 {
			t.releasing = false
			wake := r.events > 0
			t.mu.Unlock()
			if wake {
				select {
				case t.wake <- struct{}{}:
				default:
				}
			}
			return
		}
		t.mu.Unlock()
		for _, rec := range recs {
			t.p.enqueueNow(rec)
		}
	}
}

// writePosition produces the position record of a range ending with last
// into the open transaction, retrying like a lane.
func (t *transactions) writePosition(last *replication.Event) error {
	p := t.p
	msg := &kafka.Message{Key: t.cfg.PositionKey, Value: t.cfg.Position(last, t.positionsCount), Time: time.Now()}
	var buf []byte
	var failing time.Time
	for attempt := 1; ; attempt++ {
		st, err := p.producer.Stamp(p.ctx, t.seq)
		if err == nil {
			buf = kafkaproduce.AppendBatch(buf[:0], []*kafka.Message{msg}, st, time.Now())
			err = p.sink.Produce(&kafkaproduce.Batch{Topic: t.positions.topic, Partition: t.positions.partition, Leader: -1, Bytes: len(buf), Records: buf, Last: true})
			if errors.Is(err, kafka.DuplicateSequenceNumber) {
				err = nil
			}
		}
		if err == nil {
			p.producer.Acked(t.seq, st, 1)
			return nil
		}
		if p.ctx.Err() != nil {
			return p.ctx.Err()
		}
		if te := transactionFailure("Produce", err); te != nil {
			return te
		}
		if class, reason := classify(err); class != Transient {
			return fatalError(t.positions.topic, t.positions.partition, reason, err)
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > t.cfg.Timeout {
			return &TransactionError{Op: "Produce", Err: fmt.Errorf("position record not written within the transaction timeout: %w", err)}
		}
		d := p.beforeRetry(attempt, err, failing)
		p.log.LogAttrs(context.Background(), retryLevel(attempt), "position record not written, retrying", slog.String("stage", "transaction"),
			slog.String("topic", t.positions.topic), slog.Int("partition", t.positions.partition), slog.Int("attempt", attempt),
			slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return p.ctx.Err()
		}
	}
}

// end ends the open transaction (EndTxn), retrying while the coordinator
// moves or loads: a retried commit the coordinator already completed is
// answered with success.
func (t *transactions) end(commit bool) error {
	p := t.p
	op := "EndTxn(commit)"
	if !commit {
		op = "EndTxn(abort)"
	}
	var failing time.Time
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.WriteTimeout)
		err := t.coord.End(ctx, p.producer.ID(), commit)
		cancel()
		if err == nil {
			return nil
		}
		if p.ctx.Err() != nil {
			return p.ctx.Err()
		}
		if te := transactionFailure(op, err); te != nil {
			if te.Fenced {
				p.m.ProducerFenced()
			}
			return te
		}
		if !coordinatorRetry(err) {
			return &TransactionError{Op: op, Err: err}
		}
		if failing.IsZero() {
			failing = time.Now()
		} else if time.Since(failing) > t.cfg.Timeout {
			return &TransactionError{Op: op, Err: fmt.Errorf("coordinator unavailable for the transaction timeout: %w", err)}
		}
		d := p.beforeRetry(attempt, err, failing)
		p.log.LogAttrs(context.Background(), retryLevel(attempt), "transaction not ended, retrying", slog.String("stage", "transaction"),
			slog.String("op", op), slog.Int("attempt", attempt), slog.Duration("backoff", d), slog.Any("error", err))
		if !p.sleep(d) {
			return p.ctx.Err()
		}
	}
}

// abandon aborts the open transaction when the publisher closes with
// events in it, so read_committed consumers are not held at its first
// offset until the coordinator's timeout (or the next leader's
// InitProducerId). Best effort: a fenced or unreachable producer leaves
// that to the coordinator.
//
// Not when a produce request of the publisher ended unanswered (Close
// cancels those in flight): the broker may still append its batch after
// the abort's markers, and under the same epoch a broker without KIP-890's
// partition verification (before 3.6, or with it disabled) takes that
// batch as the start of a new transaction nobody ends. Its partition's
// last stable offset then sticks until the coordinator's timeout, and a
// later commit of the same producer there would make the batch visible
// out of order. The next InitProducerId (the next stream start, on this
// relay or another) aborts with a bumped epoch instead, which the late
// batch cannot pass.
func (t *transactions) abandon() {
	t.mu.Lock()
	pending := t.open.events > 0
	t.mu.Unlock()
	if !pending {
		return
	}
	if t.p.sink.Unanswered() {
		t.p.log.Info("open transaction not aborted on close: a produce request ended unanswered and could still be appended after an abort; the next leader's InitProducerId aborts it, or the coordinator after the transaction timeout",
			slog.String("stage", "transaction"))
		return
	}
	pid := t.p.producer.ID()
	if pid.ID < 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := t.coord.End(ctx, pid, false)
	t.p.m.TransactionAborted()
	if te := transactionFailure("EndTxn(abort)", err); te != nil && te.Fenced {
		t.p.m.ProducerFenced()
	}
	if err != nil {
		t.p.log.Info("open transaction not aborted on close; the coordinator aborts it after the transaction timeout, or the next leader at once",
			slog.String("stage", "transaction"), slog.Any("error", err))
		return
	}
	t.p.log.Info("open transaction aborted on close", slog.String("stage", "transaction"))
}
