package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
	"github.com/outbox-relay/outbox-relay/internal/kafkafetch"
)

// createTopic creates topic (benchkit.CreateTopic) and cleans it up with
// the run's.
func (b *bench) createTopic(ctx context.Context, topic string) error {
	b.mu.Lock()
	b.topics = append(b.topics, topic)
	b.mu.Unlock()
	return benchkit.CreateTopic(ctx, b.kafka, topic, benchkit.LeadersKnown)
}

func (b *bench) dropStaleTopics(ctx context.Context, stale func(string) bool) {
	md, err := b.kafka.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return
	}
	var old []string
	for _, t := range md.Topics {
		if stale(t.Name) {
			old = append(old, t.Name)
		}
	}
	if err := benchkit.DeleteTopics(ctx, b.kafka, old); err == nil && len(old) > 0 {
		b.logf("deleted topics of earlier runs: %v", old)
	}
}

// perfResult is the summary line of Kafka's ProducerPerformance.
type perfResult struct {
	Records   int     `json:"records"`
	Target    int     `json:"target_rate"` // -1: as fast as possible
	RecPerSec float64 `json:"records_per_sec"`
	MBPerSec  float64 `json:"mb_per_sec"`
	AvgMs     float64 `json:"avg_ms"`
	MaxMs     float64 `json:"max_ms"`
	P50Ms     float64 `json:"p50_ms"`
	P95Ms     float64 `json:"p95_ms"`
	P99Ms     float64 `json:"p99_ms"`
	P999Ms    float64 `json:"p999_ms"`
	Line      string  `json:"line"`
}

// "200000 records sent, 105263.2 records/sec (30.12 MB/sec), 180.21 ms avg latency, 350.00 ms max latency,
// 170 ms 50th, 300 ms 95th, 340 ms 99th, 349 ms 99.9th."
var perfLine = regexp.MustCompile(`(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, ` +
	`([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99\.9th`)

func parsePerf(out string) (*perfResult, error) {
	var m []string
	for _, line := range strings.Split(out, "\n") {
		if s := perfLine.FindStringSubmatch(line); s != nil {
			m = s
			m[0] = strings.TrimSpace(line)
		}
	}
	if m == nil {
		return nil, fmt.Errorf("no ProducerPerformance summary line in its output: %s", lastLines(out, 5))
	}
	f := make([]float64, len(m))
	for i := 1; i < len(m); i++ {
		f[i], _ = strconv.ParseFloat(m[i], 64)
	}
	return &perfResult{
		Records: int(f[1]), RecPerSec: f[2], MBPerSec: f[3], AvgMs: f[4], MaxMs: f[5],
		P50Ms: f[6], P95Ms: f[7], P99Ms: f[8], P999Ms: f[9], Line: m[0],
	}, nil
}

// producerPerf runs ProducerPerformance from the broker's own jars.
func (b *bench) producerPerf(ctx context.Context, topic string, records, rate int, name string) (*perfResult, error) {
	timeout := 3*time.Minute + time.Duration(records/max(rate, 1000))*time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"kafka-class", "org.apache.kafka.tools.ProducerPerformance",
		"--topic", topic, "--num-records", strconv.Itoa(records), "--record-size", "300",
		"--throughput", strconv.Itoa(rate),
		"--producer-props", "bootstrap.servers=" + strings.Join(b.cfg.Brokers, ","), "acks=all", "linger.ms=2",
		"batch.size=" + strconv.Itoa(b.cfg.KafkaBatch), "compression.type=none",
	}
	cmd := exec.CommandContext(ctx, b.cfg.Stack, args...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(b.cfg.LogDir, "producer-perf-"+name+".log"), out, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ProducerPerformance: %w: %s", err, lastLines(string(out), 5))
	}
	res, err := parsePerf(string(out))
	if err != nil {
		return nil, err
	}
	res.Target = rate
	return res, nil
}

// sample is one record seen by the consumer: its timestamp (the source
// transaction's commit time, millisecond precision) and receipt time.
type sample struct {
	ts   time.Time
	recv time.Time
}

// consumer reads every partition of a topic from its end.
type consumer struct {
	mu      sync.Mutex
	samples []sample
	first   []kafka.Message // the first keepRecords records, for checkDecodable
	readers []*kafkafetch.PartitionReader
	wg      sync.WaitGroup
	cancel  context.CancelFunc
	errs    []error
}

func (b *bench) startConsumer(ctx context.Context, topic string) (*consumer, error) {
	ctx, cancel := context.WithCancel(ctx)
	c := &consumer{cancel: cancel}
	lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
	defer lcancel()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := range benchkit.Partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	resp, err := b.kafka.ListOffsets(lctx, req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	offsets := map[int]int64{}
	for _, po := range resp.Topics[topic] {
		if po.Error != nil {
			cancel()
			return nil, fmt.Errorf("list offsets of %s/%d: %w", topic, po.Partition, po.Error)
		}
		offsets[po.Partition] = po.LastOffset
	}
	for p := range benchkit.Partitions {
		// read_committed: records of an exactly-once relay's transaction
		// become visible at its commit; aborted ones and control batches
		// are never delivered (kafka-go's Reader does neither).
		r, err := kafkafetch.New(kafkafetch.Config{
			Brokers: b.cfg.Brokers, Topic: topic, Partition: p, Offset: offsets[p],
			MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 500 * time.Millisecond,
			BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		})
		if err != nil {
			cancel()
			return nil, err
		}
		c.readers = append(c.readers, r)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				m, err := r.FetchMessage(ctx)
				now := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						c.mu.Lock()
						c.errs = append(c.errs, err)
						c.mu.Unlock()
					}
					return
				}
				c.mu.Lock()
				c.samples = append(c.samples, sample{ts: m.Time, recv: now})
				if len(c.first) < keepRecords {
					c.first = append(c.first, m)
				}
				c.mu.Unlock()
			}
		}()
	}
	return c, nil
}

// keepRecords is how many records a consumer keeps whole: enough to
// decode a sample of every partition, few enough to cost nothing.
const keepRecords = 100

// kept returns the first records received (at most keepRecords).
func (c *consumer) kept() []kafka.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.first)
}

// window returns the latencies (seconds) of records committed in
// [from, to]; record timestamps are whole milliseconds.
func (c *consumer) window(from, to time.Time) []float64 {
	from = from.Truncate(time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []float64
	for _, s := range c.samples {
		if !s.ts.Before(from) && !s.ts.After(to) {
			out = append(out, s.recv.Sub(s.ts).Seconds())
		}
	}
	return out
}

func (c *consumer) close() error {
	c.cancel()
	c.wg.Wait()
	var errs []error
	for _, r := range c.readers {
		errs = append(errs, r.Close())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return errors.Join(append(errs, c.errs...)...)
}
