//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
)

// Record is one Kafka record read back from the topic.
type Record struct {
	Partition int
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
	HeaderN   map[string]int // occurrences per header key
	Time      time.Time
	Seen      time.Time
}

// EventID is the event_id header (empty when missing).
func (r Record) EventID() string { return r.Headers["event_id"] }

// Consumer reads every partition of a topic from the earliest offset in the
// background and keeps every record.
type Consumer struct {
	t          testing.TB
	Topic      string
	Partitions int
	cancel     context.CancelFunc
	wg         sync.WaitGroup

	mu      sync.Mutex
	records []Record
	seen    map[string]int // event_id -> occurrences
	dups    int            // records whose event_id was seen before
	errs    map[int]error  // last read error per partition
}

// StartConsumer starts reading topic (which must exist with `partitions`
// partitions). It is stopped by a test cleanup or Stop.
func StartConsumer(t testing.TB, topic string, partitions int) *Consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{t: t, Topic: topic, Partitions: partitions, cancel: cancel, seen: map[string]int{}, errs: map[int]error{}}
	for p := 0; p < partitions; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers:        kafkaBrokers,
			Topic:          topic,
			Partition:      p,
			MinBytes:       1,
			MaxBytes:       16 << 20,
			MaxWait:        250 * time.Millisecond,
			QueueCapacity:  1000,
			ReadBackoffMin: 50 * time.Millisecond,
			ReadBackoffMax: 500 * time.Millisecond,
			MaxAttempts:    1 << 30,
		})
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			t.Fatalf("consumer set offset: %v", err)
		}
		c.wg.Add(1)
		go c.read(ctx, p, r)
	}
	t.Cleanup(c.Stop)
	return c
}

// StartTxnConsumer is StartConsumer through internal/kafkafetch, which
// implements the client side of Kafka transactions (kafka-go's Reader
// does not): control batches hidden and, with readCommitted, the records
// of aborted transactions dropped. readCommitted=false sees what a
// read_uncommitted consumer sees: every record an aborted transaction
// wrote, too.
func StartTxnConsumer(t testing.TB, topic string, partitions int, readCommitted bool) *Consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Consumer{t: t, Topic: topic, Partitions: partitions, cancel: cancel, seen: map[string]int{}, errs: map[int]error{}}
	for p := 0; p < partitions; p++ {
		r, err := kafkafetch.New(kafkafetch.Config{Brokers: kafkaBrokers, Topic: topic, Partition: p, Offset: kafka.FirstOffset,
			MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, ReadUncommitted: !readCommitted,
			BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond})
		if err != nil {
			t.Fatalf("consumer: %v", err)
		}
		c.wg.Add(1)
		go c.read(ctx, p, r)
	}
	t.Cleanup(c.Stop)
	return c
}

// messageReader is what Consumer reads a partition with.
type messageReader interface {
	FetchMessage(ctx context.Context) (kafka.Message, error)
	Close() error
}

func (c *Consumer) read(ctx context.Context, p int, r messageReader) {
	defer c.wg.Done()
	defer r.Close()
	for {
		m, err := r.FetchMessage(ctx) // without a group: ReadMessage
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.mu.Lock()
			c.errs[p] = err
			c.mu.Unlock()
			// wall-clock: retry interval after a read error (the reader runs until ctx ends)
			time.Sleep(200 * time.Millisecond)
			continue
		}
		rec := Record{
			Partition: m.Partition,
			Offset:    m.Offset,
			Key:       string(m.Key),
			Value:     m.Value,
			Headers:   make(map[string]string, len(m.Headers)),
			HeaderN:   make(map[string]int, len(m.Headers)),
			Time:      m.Time,
			Seen:      time.Now(),
		}
		for _, h := range m.Headers {
			rec.Headers[h.Key] = string(h.Value)
			rec.HeaderN[h.Key]++
		}
		c.mu.Lock()
		c.records = append(c.records, rec)
		if id := rec.EventID(); id != "" {
			c.seen[id]++
			if c.seen[id] > 1 {
				c.dups++
			}
		}
		c.mu.Unlock()
	}
}

// Stop stops the readers (idempotent).
func (c *Consumer) Stop() {
	c.cancel()
	c.wg.Wait()
}

// Count is the number of records read so far.
func (c *Consumer) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.records)
}

// Seen is the number of distinct event ids read so far, and of records
// that repeated an id read before: cheap enough to poll while a test runs.
func (c *Consumer) Seen() (distinct, duplicates int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen), c.dups
}

// Records returns a copy of the records read so far.
func (c *Consumer) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Record(nil), c.records...)
}

// Missing returns how many of ids have not been seen yet.
func (c *Consumer) Missing(ids map[string]Event) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for id := range ids {
		if c.seen[id] == 0 {
			n++
		}
	}
	return n
}

// WaitFor waits until every id in expected was seen, or timeout passes, then
// keeps reading for grace. It returns whether all arrived.
func (c *Consumer) WaitFor(expected map[string]Event, timeout, grace time.Duration) bool {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		missing := c.Missing(expected)
		if missing == 0 {
			// wall-clock: grace: a window in which late extra records (duplicates) would still show up
			time.Sleep(grace)
			return true
		}
		if time.Now().After(deadline) {
			c.mu.Lock()
			errs := fmt.Sprint(c.errs)
			c.mu.Unlock()
			c.t.Logf("consumer: timed out after %s with %d of %d expected ids missing (read errors: %s)", timeout, missing, len(expected), errs)
			return false
		}
		if time.Since(lastLog) > 10*time.Second {
			c.t.Logf("consumer: waiting, %d of %d expected ids missing, %d records read", missing, len(expected), c.Count())
			lastLog = time.Now()
		}
		// wall-clock: poll interval of a wait on a condition with a deadline
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitCount waits until at least n records were read.
func (c *Consumer) WaitCount(n int, timeout time.Duration) bool {
	return within(timeout, 50*time.Millisecond, func() bool { return c.Count() >= n })
}

// CheckOptions tune Check.
type CheckOptions struct {
	// TimestampSkew is the allowed |record timestamp - commit time|; 0 skips
	// the check. Events without a CommitTime are not checked.
	TimestampSkew time.Duration
	// Forbidden ids must never appear (e.g. rolled-back transactions).
	Forbidden map[string]Event
}

// Report is the result of comparing what was committed with what Kafka holds.
type Report struct {
	Committed   int
	Delivered   int // distinct expected ids seen
	Records     int // total records on the topic
	Lost        []string
	Duplicates  int // records of expected ids beyond the first
	Inversions  int // per-aggregate first occurrences out of aggregate_version order
	Unexpected  []string
	Forbidden   []string
	NoEventID   int
	Problems    map[string]int    // category -> count
	Examples    map[string]string // category -> first example
	MaxTsSkew   time.Duration
	InversionEx []string
}

func (r *Report) problem(cat, example string) {
	if r.Problems == nil {
		r.Problems = map[string]int{}
		r.Examples = map[string]string{}
	}
	r.Problems[cat]++
	if _, ok := r.Examples[cat]; !ok {
		r.Examples[cat] = example
	}
}

func (r *Report) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "committed=%d delivered=%d records=%d lost=%d duplicates=%d inversions=%d unexpected=%d forbidden=%d no_event_id=%d max_ts_skew=%s",
		r.Committed, r.Delivered, r.Records, len(r.Lost), r.Duplicates, r.Inversions, len(r.Unexpected), len(r.Forbidden), r.NoEventID, r.MaxTsSkew.Round(time.Millisecond))
	cats := make([]string, 0, len(r.Problems))
	for k := range r.Problems {
		cats = append(cats, k)
	}
	sort.Strings(cats)
	for _, k := range cats {
		fmt.Fprintf(&sb, "\n  problem %s: %d (e.g. %s)", k, r.Problems[k], r.Examples[k])
	}
	if len(r.Lost) > 0 {
		fmt.Fprintf(&sb, "\n  lost (first 10): %v", firstN(r.Lost, 10))
	}
	if len(r.Unexpected) > 0 {
		fmt.Fprintf(&sb, "\n  unexpected (first 10): %v", firstN(r.Unexpected, 10))
	}
	if len(r.Forbidden) > 0 {
		fmt.Fprintf(&sb, "\n  forbidden (first 10): %v", firstN(r.Forbidden, 10))
	}
	if len(r.InversionEx) > 0 {
		fmt.Fprintf(&sb, "\n  inversions (first 5): %v", firstN(r.InversionEx, 5))
	}
	return sb.String()
}

// OK reports whether nothing was lost, nothing forbidden or unexpected
// appeared, order held and every record was well formed.
func (r *Report) OK() bool {
	return len(r.Lost) == 0 && r.Inversions == 0 && len(r.Unexpected) == 0 && len(r.Forbidden) == 0 &&
		r.NoEventID == 0 && len(r.Problems) == 0
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Check compares the records read so far with expected.
func (c *Consumer) Check(expected map[string]Event, opts CheckOptions) *Report {
	return CheckRecords(c.Records(), c.Partitions, expected, opts)
}

// CheckRecords is Check on an explicit record list.
func CheckRecords(records []Record, partitions int, expected map[string]Event, opts CheckOptions) *Report {
	rep := &Report{Committed: len(expected), Records: len(records)}
	sort.Slice(records, func(i, j int) bool {
		if records[i].Partition != records[j].Partition {
			return records[i].Partition < records[j].Partition
		}
		return records[i].Offset < records[j].Offset
	})
	type first struct {
		partition int
		offset    int64
		version   int64
		id        string
	}
	firsts := map[string][]first{} // aggregate id -> first occurrences in (partition, offset) order
	seen := map[string]int{}
	unexpected := map[string]bool{}
	forbidden := map[string]bool{}
	for _, rec := range records {
		id := rec.EventID()
		where := fmt.Sprintf("p%d@%d", rec.Partition, rec.Offset)
		if id == "" {
			rep.NoEventID++
			rep.problem("no_event_id_header", where+" key="+rec.Key)
			continue
		}
		seen[id]++
		if seen[id] > 1 {
			if _, ok := expected[id]; ok {
				rep.Duplicates++
			}
			continue
		}
		if _, ok := opts.Forbidden[id]; ok {
			forbidden[id] = true
		}
		ev, ok := expected[id]
		if !ok {
			unexpected[id] = true
			continue
		}
		checkRecord(rep, rec, ev, partitions, opts, where)
		firsts[ev.AggregateID] = append(firsts[ev.AggregateID], first{rec.Partition, rec.Offset, ev.Version, id})
	}
	for id := range expected {
		if seen[id] == 0 {
			rep.Lost = append(rep.Lost, id)
		} else {
			rep.Delivered++
		}
	}
	sort.Strings(rep.Lost)
	for id := range unexpected {
		if !forbidden[id] {
			rep.Unexpected = append(rep.Unexpected, id)
		}
	}
	sort.Strings(rep.Unexpected)
	for id := range forbidden {
		rep.Forbidden = append(rep.Forbidden, id)
	}
	sort.Strings(rep.Forbidden)
	aggs := make([]string, 0, len(firsts))
	for a := range firsts {
		aggs = append(aggs, a)
	}
	sort.Strings(aggs)
	for _, a := range aggs {
		fs := firsts[a]
		for i := 1; i < len(fs); i++ {
			if fs[i].version <= fs[i-1].version {
				rep.Inversions++
				rep.InversionEx = append(rep.InversionEx, fmt.Sprintf("%s: v%d (p%d@%d) after v%d (p%d@%d)",
					a, fs[i].version, fs[i].partition, fs[i].offset, fs[i-1].version, fs[i-1].partition, fs[i-1].offset))
			}
		}
	}
	return rep
}

func checkRecord(rep *Report, rec Record, ev Event, partitions int, opts CheckOptions, where string) {
	ex := where + " id=" + ev.ID
	if rec.Key != ev.AggregateID {
		rep.problem("key", fmt.Sprintf("%s key=%q want %q", ex, rec.Key, ev.AggregateID))
	}
	want := map[string]string{
		"event_id":          ev.ID,
		"event_type":        ev.EventType,
		"schema_version":    strconv.Itoa(ev.SchemaVersion),
		"aggregate_type":    ev.AggregateType,
		"aggregate_version": strconv.FormatInt(ev.Version, 10),
		"trace_id":          ev.TraceID,
	}
	for k, v := range want {
		got, ok := rec.Headers[k]
		switch {
		case !ok:
			rep.problem("header_missing_"+k, ex)
		case got != v:
			rep.problem("header_value_"+k, fmt.Sprintf("%s %s=%q want %q", ex, k, got, v))
		case rec.HeaderN[k] > 1:
			rep.problem("header_repeated_"+k, ex)
		}
	}
	var payload struct {
		AggregateID string `json:"aggregate_id"`
		Version     int64  `json:"version"`
	}
	if err := json.Unmarshal(rec.Value, &payload); err != nil {
		rep.problem("payload", fmt.Sprintf("%s value %.80q: %v", ex, rec.Value, err))
	} else if payload.AggregateID != ev.AggregateID || payload.Version != ev.Version {
		rep.problem("payload", fmt.Sprintf("%s value %.80q, want aggregate_id %q version %d", ex, rec.Value, ev.AggregateID, ev.Version))
	}
	if wp := KafkaPartition([]byte(ev.AggregateID), partitions); rec.Partition != wp {
		rep.problem("partition", fmt.Sprintf("%s key=%q partition=%d want murmur2 partition %d", ex, ev.AggregateID, rec.Partition, wp))
	}
	if !ev.CommitTime.IsZero() {
		skew := rec.Time.Sub(ev.CommitTime)
		if skew < 0 {
			skew = -skew
		}
		if skew > rep.MaxTsSkew {
			rep.MaxTsSkew = skew
		}
		if opts.TimestampSkew > 0 && skew > opts.TimestampSkew {
			rep.problem("timestamp", fmt.Sprintf("%s record time %s, commit time %s (skew %s > %s)",
				ex, rec.Time.Format(time.RFC3339Nano), ev.CommitTime.Format(time.RFC3339Nano), skew, opts.TimestampSkew))
		}
	}
}

// RequireOK fails the test with the report unless rep.OK().
func RequireOK(t testing.TB, rep *Report) {
	t.Helper()
	if !rep.OK() {
		t.Fatalf("delivery check failed: %s", rep)
	}
}

// Murmur2 is the Java Kafka client's murmur2 (org.apache.kafka.common.utils.Utils.murmur2),
// ported independently of kafka-go: seed 0x9747b28c, m 0x5bd1e995, r 24.
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	n4 := length / 4
	for i := 0; i < n4; i++ {
		i4 := i * 4
		k := uint32(data[i4]) | uint32(data[i4+1])<<8 | uint32(data[i4+2])<<16 | uint32(data[i4+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	rest := data[n4*4:]
	switch len(rest) {
	case 3:
		h ^= uint32(rest[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(rest[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(rest[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KafkaPartition is the Java default partitioner for a non-null key:
// toPositive(murmur2(key)) % numPartitions.
func KafkaPartition(key []byte, partitions int) int {
	return int(uint32(Murmur2(key))&0x7fffffff) % partitions
}
