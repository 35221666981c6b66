package kafkafetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/protocol/fetch"
	"github.com/segmentio/kafka-go/protocol/listoffsets"
	"github.com/segmentio/kafka-go/protocol/metadata"

	"github.com/outbox-relay/outbox-relay/internal/backoff"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// Config describes the partition to read and how. Every zero value is a
// default.
type Config struct {
	// Brokers are the bootstrap addresses (host:port); required.
	Brokers []string
	// Topic and Partition name the one partition the reader reads.
	Topic     string
	Partition int
	// Offset is the first offset to read: an absolute offset, or
	// kafka.FirstOffset / kafka.LastOffset, resolved with ListOffsets in
	// the reader's isolation level (with read_committed LastOffset is the
	// last stable offset). The zero value is offset 0.
	Offset int64
	// End, when positive, is where reading stops: FetchMessage returns
	// io.EOF once every record before End was delivered or skipped
	// (aborted, control). A reader of a committed range gets an answer
	// without waiting for records that will never come.
	End int64
	// Dialer carries the connections' ClientID, DialFunc (or network
	// settings), Timeout, TLS and SASLMechanism; nil is
	// kafka.DefaultDialer. Its Resolver and Deadline are not used.
	Dialer *kafka.Dialer
	// MinBytes, MaxBytes and MaxWait go into every fetch request as a
	// kafka.Reader would send them (defaults 1, 1 MiB, 500ms). MaxBytes is
	// also the partition's limit; a first batch larger than it still
	// comes whole (the broker's rule since KIP-74).
	MinBytes int
	MaxBytes int
	MaxWait  time.Duration
	// RequestTimeout bounds a request's round trip beyond MaxWait
	// (default 10s); a fetch that takes longer is retried.
	RequestTimeout time.Duration
	// ReadUncommitted reads past the last stable offset and delivers the
	// records of aborted and open transactions. The default is
	// read_committed: only committed records, in log order. Control
	// batches are hidden in both.
	ReadUncommitted bool
	// Markers makes FetchRecord return the control records too (the
	// COMMIT and ABORT markers of transactions), as Records with their
	// Marker set, and FetchMessage skip them. With ReadUncommitted, a
	// caller can then decide transactions itself: a record counts once its
	// producer's COMMIT follows it. That reads past the last stable
	// offset, which other producers' open transactions may hold back for
	// as long as their transaction timeout.
	Markers bool
	// BackoffMin and BackoffMax bound the full-jitter backoff between
	// retries of a failed request (defaults 100ms and 1s).
	BackoffMin, BackoffMax time.Duration
	// Logger receives a warning per retried failure (topic, partition,
	// offset, error; never a record); nil discards them.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MinBytes <= 0 {
		c.MinBytes = 1
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = 1 << 20
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 500 * time.Millisecond
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 10 * time.Second
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 100 * time.Millisecond
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(time.Second, c.BackoffMin)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// ErrClosed is returned by FetchMessage once the reader is closed.
var ErrClosed = errors.New("kafkafetch: reader closed")

// OffsetOutOfRangeError is FetchMessage's error when the broker answers
// OFFSET_OUT_OF_RANGE and the offset is indeed outside the partition's
// log: below First (retention deleted what was not read yet) or past Last
// (a log truncated or recreated under a stored offset). It unwraps to
// kafka.OffsetOutOfRange.
type OffsetOutOfRangeError struct {
	Topic       string
	Partition   int
	Offset      int64
	First, Last int64
}

func (e *OffsetOutOfRangeError) Error() string {
	return fmt.Sprintf("kafkafetch: %s/%d: offset %d is outside the log [%d, %d]", e.Topic, e.Partition, e.Offset, e.First, e.Last)
}

func (e *OffsetOutOfRangeError) Unwrap() error { return kafka.OffsetOutOfRange }

// PartitionReader reads one topic partition from an offset, with
// transactions handled on the client side (see the package
// documentation). FetchMessage is for one goroutine at a time; Close may
// be called from any.
type PartitionReader struct {
	cfg   Config
	dec   decoder
	addr  net.Addr
	tr    *kafka.Transport
	conns *connSet

	// stop ends the context of the transport and of the fetching
	// goroutine (run), which fetcher runs; Close stops both, waiting for
	// the goroutine.
	stop    context.CancelFunc
	fetcher *startstop.Service
	results chan fetchItem // unbuffered: one response ahead, no more
	// sizer is the fetching goroutine's (see fetchSizer).
	sizer     fetchSizer
	closeOnce sync.Once

	// Owned by FetchMessage's caller.
	pending []Record
	err     error // sticky: a permanent error or ErrClosed
}

// fetchItem is a response's messages, or the error that ended fetching.
type fetchItem struct {
	msgs []Record
	err  error
}

// New checks cfg and starts fetching in the background. It does not wait
// for a broker: connection failures are retried, and permanent ones come
// out of FetchMessage.
func New(cfg Config) (*PartitionReader, error) {
	cfg = cfg.withDefaults()
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafkafetch: Brokers is required")
	case cfg.Topic == "":
		return nil, errors.New("kafkafetch: Topic is required")
	case cfg.Partition < 0:
		return nil, fmt.Errorf("kafkafetch: Partition %d is negative", cfg.Partition)
	case cfg.Offset < 0 && cfg.Offset != kafka.FirstOffset && cfg.Offset != kafka.LastOffset:
		return nil, fmt.Errorf("kafkafetch: Offset %d: use an offset >= 0, kafka.FirstOffset or kafka.LastOffset", cfg.Offset)
	}
	ctx, stop := context.WithCancel(context.Background())
	conns := &connSet{}
	r := &PartitionReader{
		cfg:     cfg,
		dec:     decoder{topic: cfg.Topic, partition: cfg.Partition, readCommitted: !cfg.ReadUncommitted, markers: cfg.Markers},
		addr:    kafka.TCP(cfg.Brokers...),
		tr:      newTransport(ctx, cfg.Dialer, cfg.Topic, conns),
		conns:   conns,
		stop:    stop,
		results: make(chan fetchItem),
		sizer:   newFetchSizer(cfg.MaxBytes),
	}
	r.fetcher = startstop.New(r.run)
	r.fetcher.Start(ctx)
	return r, nil
}

// FetchMessage returns the next message: at once if the last response
// still holds one, else when the next response arrives or ctx ends. A
// permanent error (wrapped with %w; an *OffsetOutOfRangeError among them)
// is returned from then on; after Close it is ErrClosed.
func (r *PartitionReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	for {
		rec, err := r.FetchRecord(ctx)
		if err != nil || rec.Marker == MarkerNone {
			return rec.Message, err
		}
	}
}

// FetchRecord is FetchMessage with the record's producer and, with
// Config.Markers, the transaction markers as records of their own.
func (r *PartitionReader) FetchRecord(ctx context.Context) (Record, error) {
	for len(r.pending) == 0 {
		if r.err != nil {
			return Record{}, r.err
		}
		select {
		case it, ok := <-r.results:
			switch {
			case !ok:
				r.err = ErrClosed
			case it.err != nil:
				r.err = it.err
			default:
				r.pending = it.msgs
			}
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
	m := r.pending[0]
	r.pending[0] = Record{} // the caller owns it now
	r.pending = r.pending[1:]
	return m, nil
}

// Record is a fetched record with who wrote it: FetchRecord's answer.
type Record struct {
	kafka.Message
	// ProducerID is the producer id of the record's batch; -1 when the
	// producer had none (neither idempotent nor transactional).
	ProducerID int64
	// Transactional says the record belongs to a transaction of
	// ProducerID, decided by that producer's next marker.
	Transactional bool
	// Marker is the marker a control record stands for (Config.Markers);
	// MarkerNone for a data record. A marker's Message has only Topic,
	// Partition and Offset.
	Marker Marker
}

// Marker is the type of a transaction marker (a control record).
type Marker int8

// Markers of FetchRecord's Records.
const (
	MarkerNone Marker = iota
	MarkerCommit
	MarkerAbort
)

// Close stops fetching, waits for the fetching goroutine and closes every
// connection of the reader; it always returns nil.
func (r *PartitionReader) Close() error {
	r.closeOnce.Do(func() {
		r.stop()
		r.fetcher.Stop()
		r.tr.CloseIdleConnections()
		r.conns.closeAll()
	})
	return nil
}

// run fetches from the start offset until ctx ends or an error is
// permanent, handing each non-empty response to FetchMessage.
func (r *PartitionReader) run(ctx context.Context) {
	defer close(r.results)
	offset, err := r.startOffset(ctx)
	for err == nil {
		if r.cfg.End > 0 && offset >= r.cfg.End {
			err = io.EOF
			break
		}
		var out decoded
		out, err = r.fetch(ctx, offset)
		if err != nil {
			break
		}
		offset = out.next
		if len(out.msgs) > 0 {
			select {
			case r.results <- fetchItem{msgs: out.msgs}:
			case <-ctx.Done():
				return
			}
		}
	}
	if ctx.Err() == nil {
		select {
		case r.results <- fetchItem{err: err}:
		case <-ctx.Done():
		}
	}
}

// startOffset resolves cfg.Offset.
func (r *PartitionReader) startOffset(ctx context.Context) (int64, error) {
	if r.cfg.Offset >= 0 {
		return r.cfg.Offset, nil
	}
	var offset int64
	err := r.retry(ctx, r.cfg.Offset, "list offsets", func(ctx context.Context) error {
		var err error
		offset, err = r.listOffset(ctx, r.cfg.Offset)
		return err
	})
	return offset, err
}

// fetch returns the next response at offset, retrying what a retry may
// cure. A response with records that all lie below offset (possible after
// compaction) is waited out with the minimum backoff, not refetched in a
// hot loop.
func (r *PartitionReader) fetch(ctx context.Context, offset int64) (decoded, error) {
	var out decoded
	err := r.retry(ctx, offset, "fetch", func(ctx context.Context) error {
		var err error
		out, err = r.fetchOnce(ctx, offset)
		if oor := (*OffsetOutOfRangeError)(nil); errors.As(err, &oor) && oor.First <= offset && offset <= oor.Last {
			// The log moved between the fetch and ListOffsets (a new
			// leader, retention): the offset is valid now.
			return errRetryNow
		}
		return err
	})
	if err == nil && out.stalled {
		backoff.Sleep(ctx, r.cfg.BackoffMin)
	}
	return out, err
}

// errRetryNow asks retry for a retry after the minimum backoff, without
// a log line.
var errRetryNow = errors.New("retry now")

// retry runs op until it succeeds, ctx ends (ctx.Err()) or its error is
// permanent. Between attempts it backs off and, after an error that may
// come from stale metadata or a dead connection, drops the transport's
// pools: kafka-go serves metadata from a cache it refreshes only every
// MetadataTTL, so without that a leader move would stall the reader.
func (r *PartitionReader) retry(ctx context.Context, offset int64, what string, op func(context.Context) error) error {
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.MaxWait+r.cfg.RequestTimeout)
		err := op(rctx)
		cancel()
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, errRetryNow):
			if !backoff.Sleep(ctx, r.cfg.BackoffMin) {
				return ctx.Err()
			}
			continue
		case !retriable(err):
			return fmt.Errorf("kafkafetch: %s %s/%d at offset %d: %w", what, r.cfg.Topic, r.cfg.Partition, offset, err)
		}
		r.cfg.Logger.Warn("kafkafetch: request failed; retrying", slog.String("stage", "kafka"), slog.String("request", what),
			slog.String("topic", r.cfg.Topic), slog.Int("partition", r.cfg.Partition), slog.Int64("offset", offset),
			slog.Int("attempt", attempt), slog.Any("error", err))
		r.tr.CloseIdleConnections()
		if !backoff.Sleep(ctx, backoff.Jitter(attempt, r.cfg.BackoffMin, r.cfg.BackoffMax)) {
			return ctx.Err()
		}
	}
}

// retriable reports whether a retry may cure err: Kafka's retriable
// errors (a leader move, an unknown or leaderless partition, a fenced or
// unknown leader epoch, a timeout), kafka-go's routing errors (the
// partition missing from its cached metadata) and network failures -
// except a TLS or SASL failure, which no retry cures.
func retriable(err error) bool {
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		return kerr.Temporary() || kerr == kafka.ReplicaNotAvailable || kerr == kafka.BrokerNotAvailable
	}
	var oor *OffsetOutOfRangeError
	if errors.As(err, &oor) {
		return false
	}
	var ferr *fetch.Error
	if errors.As(err, &ferr) {
		return true
	}
	if errors.Is(err, errMalformed) {
		return false
	}
	return kafkaconn.Classify(err) == kafkaconn.FailureNone
}

// errMalformed marks a response that cannot be read (a corrupt batch, a
// malformed control record): permanent, since the same bytes come back.
var errMalformed = errors.New("malformed fetch response")

// fetchOnce sends one fetch request and decodes its answer.
func (r *PartitionReader) fetchOnce(ctx context.Context, offset int64) (decoded, error) {
	iso := int8(kafka.ReadCommitted)
	if r.cfg.ReadUncommitted {
		iso = int8(kafka.ReadUncommitted)
	}
	m, err := r.tr.RoundTrip(ctx, r.addr, &fetch.Request{
		ReplicaID:      -1,
		MaxWaitTime:    int32(r.cfg.MaxWait.Milliseconds()),
		MinBytes:       int32(r.cfg.MinBytes),
		MaxBytes:       int32(r.sizer.next),
		IsolationLevel: iso,
		SessionID:      0,  // no fetch session:
		SessionEpoch:   -1, // a full, sessionless fetch every time
		Topics: []fetch.RequestTopic{{
			Topic: r.cfg.Topic,
			Partitions: []fetch.RequestPartition{{
				Partition:          int32(r.cfg.Partition),
				CurrentLeaderEpoch: -1,
				FetchOffset:        offset,
				LogStartOffset:     -1,
				PartitionMaxBytes:  int32(r.sizer.next),
			}},
		}},
	})
	if err != nil {
		return decoded{}, r.routingCause(ctx, err)
	}
	res, ok := m.(*fetch.Response)
	if !ok {
		return decoded{}, fmt.Errorf("unexpected response %T", m)
	}
	if res.ErrorCode != 0 {
		return decoded{}, kafka.Error(res.ErrorCode)
	}
	p := r.partitionOf(res)
	if p == nil {
		return decoded{}, fmt.Errorf("fetch response without %s/%d", r.cfg.Topic, r.cfg.Partition)
	}
	if p.ErrorCode != 0 {
		err := kafka.Error(p.ErrorCode)
		if err == kafka.OffsetOutOfRange {
			return decoded{}, r.outOfRange(ctx, offset)
		}
		return decoded{}, err
	}
	r.sizer.observe(len(batches(p.RecordSet.Records)))
	out, err := r.dec.decode(p, offset)
	if err != nil {
		return decoded{}, fmt.Errorf("%w: %w", errMalformed, err)
	}
	return out, nil
}

// fetchSizer picks each fetch's MaxBytes. kafka-go decodes every record
// batch of a response into a page buffer of its own, at least one 64 KiB
// page, held until the batch's records are released: a response of many
// small batches (a transactional producer's commit markers, one-record
// batches of a producer without linger) costs 64 KiB per batch, so a
// 1 MiB response of 70-byte batches would take 900 MiB. The sizer keeps
// the batches of one response near pageBudget: it starts at minFetchBytes
// and sets the next MaxBytes from the last response's batch count,
// growing at most twofold per response, up to the configured MaxBytes.
type fetchSizer struct {
	next, max int
}

const (
	// pageBudget is the batches one response may hold: 128 pages of
	// 64 KiB, 8 MiB.
	pageBudget    = 128
	minFetchBytes = 16 << 10
)

func newFetchSizer(max int) fetchSizer {
	return fetchSizer{next: min(minFetchBytes, max), max: max}
}

// observe takes the batch count of a response fetched with s.next.
func (s *fetchSizer) observe(batches int) {
	want := s.max
	if batches > 0 {
		want = s.next * pageBudget / batches // the average batch size × the budget
	}
	s.next = max(min(want, 2*s.next, s.max), min(minFetchBytes, s.max))
}

// routingCause adds to err, when kafka-go's Transport could not route a
// request (a *fetch.Error: the partition is missing from its metadata),
// the reason its metadata is missing, if the metadata request failed: a
// rejected TLS handshake or SASL login surfaces only there, and it is
// permanent where "no such partition yet" is not.
func (r *PartitionReader) routingCause(ctx context.Context, err error) error {
	var ferr *fetch.Error
	if !errors.As(err, &ferr) {
		return err
	}
	if _, merr := r.tr.RoundTrip(ctx, r.addr, &metadata.Request{TopicNames: []string{r.cfg.Topic}}); merr != nil {
		return fmt.Errorf("%w (metadata: %w)", err, merr)
	}
	return err
}

// partitionOf finds the reader's partition in res.
func (r *PartitionReader) partitionOf(res *fetch.Response) *fetch.ResponsePartition {
	for i := range res.Topics {
		t := &res.Topics[i]
		if t.Topic != r.cfg.Topic {
			continue
		}
		for j := range t.Partitions {
			if int(t.Partitions[j].Partition) == r.cfg.Partition {
				return &t.Partitions[j]
			}
		}
	}
	return nil
}

// outOfRange builds the *OffsetOutOfRangeError of offset from the log's
// current bounds.
func (r *PartitionReader) outOfRange(ctx context.Context, offset int64) error {
	first, err := r.listOffset(ctx, kafka.FirstOffset)
	if err != nil {
		return fmt.Errorf("offset %d out of range; its bounds: %w", offset, err)
	}
	last, err := r.listOffset(ctx, kafka.LastOffset)
	if err != nil {
		return fmt.Errorf("offset %d out of range; its bounds: %w", offset, err)
	}
	return &OffsetOutOfRangeError{Topic: r.cfg.Topic, Partition: r.cfg.Partition, Offset: offset, First: first, Last: last}
}

// listOffset asks the partition's leader for the first (kafka.FirstOffset)
// or last (kafka.LastOffset) offset, in the reader's isolation level.
func (r *PartitionReader) listOffset(ctx context.Context, which int64) (int64, error) {
	iso := int8(kafka.ReadCommitted)
	if r.cfg.ReadUncommitted {
		iso = int8(kafka.ReadUncommitted)
	}
	m, err := r.tr.RoundTrip(ctx, r.addr, &listoffsets.Request{
		ReplicaID:      -1,
		IsolationLevel: iso,
		Topics: []listoffsets.RequestTopic{{
			Topic:      r.cfg.Topic,
			Partitions: []listoffsets.RequestPartition{{Partition: int32(r.cfg.Partition), CurrentLeaderEpoch: -1, Timestamp: which}},
		}},
	})
	if err != nil {
		return 0, err
	}
	res, ok := m.(*listoffsets.Response)
	if !ok {
		return 0, fmt.Errorf("unexpected response %T", m)
	}
	for _, t := range res.Topics {
		for _, p := range t.Partitions {
			if t.Topic == r.cfg.Topic && int(p.Partition) == r.cfg.Partition {
				if p.ErrorCode != 0 {
					return 0, kafka.Error(p.ErrorCode)
				}
				return p.Offset, nil
			}
		}
	}
	return 0, fmt.Errorf("list offsets response without %s/%d", r.cfg.Topic, r.cfg.Partition)
}
