package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// prefixBase starts the name of everything a run creates: schema, slots,
// publications, topics. The run id after it is the start time in base 36.
const prefixBase = "outbox_bench_"

func runIDTime(name string) (time.Time, bool) {
	rest := strings.TrimPrefix(name, prefixBase)
	if i := strings.IndexAny(rest, "_."); i >= 0 {
		rest = rest[:i]
	}
	sec, err := strconv.ParseInt(rest, 36, 64)
	if err != nil || sec < 1_600_000_000 || sec > 4_000_000_000 {
		return time.Time{}, false
	}
	return time.Unix(sec, 0), true
}

type bench struct {
	cfg    *config
	logw   io.Writer
	pool   *pgxpool.Pool
	kafka  *kafka.Client
	id     string
	prefix string
	schema string
	topic  string

	// registry is the schema registry of the registry formats; nil
	// without -schema-registry-url.
	registry *registry

	mu       sync.Mutex
	relays   []*relayProc
	targets  []*target
	topics   []string
	subjects []string // registry subjects
	cleaned  bool

	// variant and round are those of the relays started now: their
	// --delivery and --record-format, and the suffix of their names.
	variant variant
	round   int
}

func newBench(ctx context.Context, cfg *config, logw io.Writer) (*bench, error) {
	if _, err := os.Stat(cfg.RelayBin); err != nil && !cfg.CleanupOnly {
		return nil, fmt.Errorf("relay binary: %w (go build -o bin/outbox-relay ./cmd/outbox-relay)", err)
	}
	pool, err := benchkit.OpenPool(ctx, cfg.DatabaseURL, 6, "outbox-bench")
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(time.Now().Unix(), 36)
	b := &bench{
		cfg: cfg, logw: logw, pool: pool,
		kafka:  benchkit.KafkaClient(cfg.Brokers),
		id:     id,
		prefix: prefixBase + id,
	}
	b.schema = b.prefix
	b.topic = b.prefix + "_events"
	b.variant = newVariant(deliveryALO, formatNative)
	// Only a run that uses the registry (or -cleanup) talks to it, so a
	// default run never depends on it, not even to drop stale subjects.
	if cfg.RegistryURL != "" && (len(cfg.registryFormats()) > 0 || cfg.CleanupOnly) {
		b.registry = newRegistry(cfg.RegistryURL)
	}
	return b, nil
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.logw, "%s outbox-bench: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func (b *bench) close() {
	b.cleanup()
	b.pool.Close()
}

// cleanup stops every relay of the run, drops the ceiling slots always and
// the rest unless -keep. Idempotent; runs on its own deadline so it also
// works after the run's context ended.
func (b *bench) cleanup() {
	b.mu.Lock()
	if b.cleaned {
		b.mu.Unlock()
		return
	}
	b.cleaned = true
	relays, targets, topics, subjects := b.relays, b.targets, b.topics, b.subjects
	b.mu.Unlock()
	for _, r := range relays {
		_ = r.stop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, t := range targets {
		if err := b.dropTarget(ctx, t); err != nil {
			b.logf("cleanup: %v", err)
		}
	}
	if b.cfg.Keep {
		b.logf("-keep: left schema %s, slots and publications %s_*, topics %v, registry subjects %v", b.schema, b.prefix, topics, subjects)
		return
	}
	b.deleteSubjects(ctx, subjects)
	if len(targets) > 0 {
		if _, err := b.pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+b.schema+` CASCADE`); err != nil {
			b.logf("cleanup: drop schema %s: %v", b.schema, err)
		}
	}
	if err := benchkit.DeleteTopics(ctx, b.kafka, topics); err != nil {
		b.logf("cleanup: %v", err)
	}
	if len(subjects) > 0 {
		b.logf("cleaned up schema %s, slots/publications %s_*, topics %v, registry subjects %v", b.schema, b.prefix, topics, subjects)
		return
	}
	b.logf("cleaned up schema %s, slots/publications %s_*, topics %v", b.schema, b.prefix, topics)
}

// run executes the selected phases; a failing phase is reported and the
// next one still runs.
func (b *bench) run(ctx context.Context) *results {
	res := &results{RunID: b.id, Started: time.Now(), Host: benchkit.ReadHost(ctx, b.pool, "4.1.1", ""), Config: b.configSummary()}
	b.logf("run %s: logs in %s", b.id, b.cfg.LogDir)
	fail := func(phase string, err error) {
		msg := fmt.Sprintf("%s: %v", phase, err)
		if ctx.Err() != nil {
			msg += fmt.Sprintf(" (run stopped: %v)", context.Cause(ctx))
		}
		b.logf("phase failed: %s", msg)
		res.Errors = append(res.Errors, msg)
	}
	if err := b.createTopic(ctx, b.topic); err != nil {
		fail("setup", err)
		res.Finished = time.Now()
		return res
	}
	if err := b.setupFormats(ctx); err != nil {
		fail("setup", err)
		res.Finished = time.Now()
		return res
	}
	// The Kafka ceiling runs first: it also warms the broker's JVM. A
	// just-started broker spent several times more CPU per request
	// through the first three 200,000-event drains, and on a 2-core
	// machine that CPU is taken from the WAL sender the drain measures
	// (docs/benchmarks.md).
	if b.cfg.Phases["kafka"] && ctx.Err() == nil {
		k, err := b.kafkaCeiling(ctx)
		res.Kafka = k
		if err != nil {
			fail("kafka ceiling", err)
		}
	}
	if b.cfg.Phases["drain"] && !b.cfg.Phases["kafka"] && b.cfg.Warmup && ctx.Err() == nil {
		if err := b.warmBroker(ctx); err != nil {
			fail("broker warm-up", err)
		}
	}
	if b.cfg.Phases["drain"] && ctx.Err() == nil {
		for round := 1; round <= b.cfg.Rounds; round++ {
			for _, mode := range b.cfg.Modes {
				for _, v := range b.cfg.variants() {
					if ctx.Err() != nil {
						break
					}
					b.variant, b.round = v, round
					d, err := b.drain(ctx, mode)
					if d != nil {
						d.variant, d.Round = v, round
						res.Drains = append(res.Drains, *d)
					}
					if err != nil {
						fail(fmt.Sprintf("drain (%d-event transactions, %s)", mode, v), err)
					}
				}
			}
		}
	}
	if b.cfg.Phases["latency"] && ctx.Err() == nil {
		c, err := b.latencyCeiling(ctx)
		res.LatencyCeiling = c
		if err != nil {
			fail("latency ceiling", err)
		}
	}
	if b.cfg.Phases["latency"] && ctx.Err() == nil {
		for round := 1; round <= b.cfg.Rounds; round++ {
			for _, v := range b.cfg.variants() {
				if ctx.Err() != nil {
					break
				}
				b.variant, b.round = v, round
				l, dec, err := b.latency(ctx)
				for i := range l {
					l[i].variant, l[i].Round = v, round
				}
				res.Latency = append(res.Latency, l...)
				if dec != nil {
					dec.variant, dec.Round = v, round
					res.Decodes = append(res.Decodes, *dec)
				}
				if err != nil {
					fail("latency ("+v.String()+")", err)
				}
			}
		}
	}
	b.variant, b.round = newVariant(deliveryALO, formatNative), 0
	if b.cfg.Phases["bigtx"] && b.cfg.BigTx > 0 && ctx.Err() == nil {
		bt, err := b.bigTx(ctx)
		res.BigTx = bt
		if err != nil {
			fail("large transaction", err)
		}
	}
	res.Finished = time.Now()
	res.Host.LoadEnd = benchkit.LoadAvg()
	return res
}

func (b *bench) configSummary() string {
	c := b.cfg
	s := fmt.Sprintf("-n %d -modes %s -rates %s -latency-tx %s -duration %s -bigtx %d -preload-conns %d",
		c.N, benchkit.JoinInts(c.Modes), benchkit.JoinInts(c.Rates), benchkit.JoinInts(c.LatencyTx), c.Duration, c.BigTx, c.Parallel)
	if len(c.Deliveries) > 1 || c.Deliveries[0] != deliveryALO {
		s += " -delivery " + strings.Join(c.Deliveries, ",")
	}
	if len(c.Formats) > 1 || c.Formats[0] != formatNative {
		s += " -formats " + strings.Join(c.Formats, ",")
	}
	if c.Rounds > 1 {
		s += fmt.Sprintf(" -rounds %d", c.Rounds)
	}
	if c.Quick {
		s += " (-quick)"
	}
	return s
}
