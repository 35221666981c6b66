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
// goroutine (transactions.run, a startstop service) closes the open
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
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
	"github.com/outbox-relay/outbox-relay/internal/positions"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/replication"
)

// TransactionConfig turns on exactly-once writes (Config.Transactions).
// Only package relay starts them (Publish.Delivery ExactlyOnce): before the
// first Publish it fences the previous leader's producer and reads the
// newest committed position, steps in an order only it knows. Publish of
// a Publisher nobody started that way fails.
type TransactionConfig struct {
	// ID is the transactional id. Every publisher of the same source
	// must use the same one: the relay's InitProducerId at the start
	// then fences the previous holder, whose open transaction the
	// coordinator aborts and whose later requests it refuses.
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
	Position func(last *replication.WALEvent, partitions int) []byte
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
	// TimedOut reports the same refusals once the transaction had been
	// open for the transaction timeout (Open, Timeout): the coordinator
	// aborted it and bumped the epoch, which refuses the producer just as
	// a newer one would, without anyone taking over. Fenced is false then.
	TimedOut      bool
	Open, Timeout time.Duration
	Err           error
}

func (e *TransactionError) Error() string {
	switch {
	case e.TimedOut:
		return fmt.Sprintf("kafka transaction: %s: the transaction was open %s, past the transaction timeout (%s), so the coordinator aborted it "+
			"and bumped the producer epoch, which refuses this producer as a newer one would: %v (restarting from the last committed position; "+
			"if commits take this long, raise Publish.TransactionTimeout, at most the brokers' transaction.max.timeout.ms)",
			e.Op, e.Open.Round(time.Millisecond), e.Timeout, e.Err)
	case e.Fenced:
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

// failure is transactionFailure for a request of the open transaction.
// An epoch refusal (Fenced) once the transaction has been open for the
// transaction timeout is the coordinator's own abort: since KIP-360
// (Kafka 2.5) it aborts a transaction left open that long with a bumped
// epoch, and the producer's next AddPartitionsToTxn, produce or EndTxn is
// refused exactly as if a newer producer had taken over. Reported as
// fencing it would send an operator looking for a second relay; it is
// reported as the timeout, with the setting to raise. The transaction's
// age is taken from the answer to its first AddPartitionsToTxn, after the
// coordinator started its clock, so a refusal is called a timeout only
// when the timeout surely passed.
func (t *transactions) failure(op string, err error) *TransactionError {
	te := transactionFailure(op, err)
	if te == nil || !te.Fenced {
		return te
	}
	t.mu.Lock()
	began := t.began
	t.mu.Unlock()
	if open := time.Since(began); !began.IsZero() && open >= t.cfg.Timeout {
		return &TransactionError{Op: te.Op, TimedOut: true, Open: open, Timeout: t.cfg.Timeout, Err: te.Err}
	}
	return te
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

// errNotStarted is Publish's error in exactly-once mode before the relay
// started the transactions (TransactionConfig): nothing would ever commit
// the events. No sentinel: no caller of this package can start them.
var errNotStarted = errors.New("publisher: exactly-once transactions (Config.Transactions) were not started: package relay starts them")

// transactions is the publisher's exactly-once state.
type transactions struct {
	p *Publisher
	// begun is set once begin took the producer id and started the
	// committer: Publish refuses events before.
	begun  atomic.Bool
	cfg    TransactionConfig
	client *kafka.Client
	// coord makes the transactional id's coordinator calls.
	coord kafkaproduce.Txn
	// positions is the partition of the position records, and its
	// sequence state; positionsCount the topic's partition count. Set by
	// begin.
	positions      kafkaproduce.TopicPartition
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
	// added is the partitions added to the open Kafka transaction;
	// began is when the first of them was (zero while none is): the
	// coordinator's transaction timeout runs from then.
	added map[kafkaproduce.TopicPartition]bool
	began time.Time
	// wake tells the committer to look again: a range got its first
	// event or filled up.
	wake chan struct{}
	// loop runs the committer (run): started by Begin, stopped by
	// Publisher.Close before abandon.
	loop *startstop.Service
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
	t := &transactions{p: p, cfg: cfg, client: p.client, coord: kafkaproduce.Txn{Client: p.client, ID: cfg.ID, Timeout: cfg.Timeout}, open: &txnRange{}, added: map[kafkaproduce.TopicPartition]bool{},
		wake: make(chan struct{}, 1)}
	t.loop = startstop.New(t.run)
	return t
}

func init() { positions.Begin = beginPositions }

// beginPositions is positions.Begin: the relay's route to begin, which is
// no method of the API because only the relay can call it at the right
// moment (see package positions).
func beginPositions(ctx context.Context, pub any) (positions.Topic, error) {
	p, ok := pub.(*Publisher)
	if !ok {
		return positions.Topic{Partition: -1}, fmt.Errorf("positions.Begin: %T is not a *publisher.Publisher", pub)
	}
	return p.begin(ctx)
}

// begin takes the transactional producer id (exactly-once mode; a no-op
// otherwise) and must succeed before the first Publish; positions.Begin
// says why and when. It returns the positions topic's layout for the
// relay's read of the newest committed position.
func (p *Publisher) begin(ctx context.Context) (positions.Topic, error) {
	t := p.txn
	if t == nil {
		return positions.Topic{Partition: -1}, nil
	}
	if err := t.ensurePositionsTopic(ctx); err != nil {
		return positions.Topic{Partition: -1}, err
	}
	id, err := t.initProducerID(ctx)
	if err != nil {
		return positions.Topic{Partition: -1}, err
	}
	p.producer.Adopt(id)
	p.log.Info("transactional producer ready: earlier producers of the transactional id are fenced", slog.String("stage", "transaction"),
		slog.String("transactional_id", t.cfg.ID), slog.Int64("producer_id", id.ID), slog.Int("producer_epoch", int(id.Epoch)))
	t.loop.Start(p.ctx)
	t.begun.Store(true)
	return t.topic(), nil
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
