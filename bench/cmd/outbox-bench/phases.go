package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

const (
	mPublished   = "outbox_relay_events_published_total"
	mDecoded     = "outbox_relay_events_decoded_total"
	mStarts      = "outbox_relay_replication_starts_total"
	mPubErrors   = "outbox_relay_publish_errors_total"
	mCommitToAck = "outbox_relay_commit_to_ack_seconds"
	mCommitToDec = "outbox_relay_commit_to_decode_seconds"
)

// drainTimeout bounds one reader of an n-event backlog (generously: a
// reader slower than 1,000 events/s is broken, not slow).
func drainTimeout(n int) time.Duration {
	return 2*time.Minute + time.Duration(n/1000)*time.Second
}

// drain measures one mode: a backlog of N events in transactions of mode
// events, read first by pg_recvlogical (the ceiling), then by the relay.
func (b *bench) drain(ctx context.Context, mode int) (*drainResult, error) {
	n := b.cfg.N
	d := &drainResult{Mode: mode, Events: n}
	tag := fmt.Sprintf("m%d", mode) + b.variant.tag(b.round)
	b.logf("drain, %d-event transactions (%s): migrate %s and create the ceiling slot", mode, b.variant, tag)
	t, err := b.newTarget(ctx, tag, true)
	defer func() {
		if t != nil && t.ceilingCreated {
			if err := b.dropSlot(context.Background(), t.ceiling); err != nil {
				b.logf("drop ceiling slot: %v", err)
			} else {
				t.ceilingCreated = false
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	pgStart := b.pgStartTime(ctx)

	from, err := b.walInsertLSN(ctx)
	if err != nil {
		return nil, err
	}
	b.logf("drain, %d-event transactions: preloading %d events", mode, n)
	t0 := time.Now()
	if err := b.preload(ctx, t, n, mode); err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	d.PreloadSec = time.Since(t0).Seconds()
	lsn, err := b.walInsertLSN(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.fence(ctx); err != nil {
		return nil, fmt.Errorf("fence: %w", err)
	}
	d.EndLSN = lsn.String()
	d.WALBytes = int64(lsn - from)
	_ = b.pool.QueryRow(ctx, `SELECT avg(octet_length(payload::text)) FROM (SELECT payload FROM `+t.table+` LIMIT 1000) s`).Scan(&d.PayloadBytes)
	b.logf("drain, %d-event transactions: preloaded in %.1f s, %.1f MiB of WAL up to %s", mode, d.PreloadSec, float64(d.WALBytes)/(1<<20), lsn)

	// (a) the ceiling: pg_recvlogical on the second slot, same WAL.
	if err := b.ceiling(ctx, t, lsn, d); err != nil {
		return d, err
	}
	if err := b.dropSlot(ctx, t.ceiling); err != nil {
		return d, err
	}
	t.ceilingCreated = false
	b.logf("drain, %d-event transactions: pg_recvlogical %.2f s (%.0f events/s)", mode, d.CeilingSec, d.CeilingRate())

	// (b) the relay, from its own slot created at the same point.
	r, err := b.startRelay(t, "drain-"+tag)
	if err != nil {
		return d, err
	}
	defer r.stop()
	ws := b.watchWalsender(ctx, t.slot)
	var readyAt atomic.Pointer[time.Time]
	go func() {
		if r.waitReady(ctx, time.Minute) == nil {
			now := time.Now()
			readyAt.Store(&now)
		}
	}()
	profiled := b.profileDrain(ctx, r, tag, d.CeilingSec)
	doneAt, err := b.waitConfirmed(ctx, t.slot, lsn, drainTimeout(n), r.alive)
	d.RelayWalsenderCPU = ws.seconds()
	profiled()
	if err != nil {
		return d, err
	}
	d.RelaySec = doneAt.Sub(r.started).Seconds()
	if at := readyAt.Load(); at != nil {
		d.RelayStartupSec = at.Sub(r.started).Seconds()
	}
	if err := b.relayStats(ctx, r, &d.relayStats); err != nil {
		return d, err
	}
	if m, err := r.scrape(ctx); err == nil {
		d.txStats = txDiff(m, metrics{})
	}
	if err := r.stop(); err != nil {
		d.Notes = append(d.Notes, "relay stop: "+err.Error())
	}
	b.logf("drain, %d-event transactions: relay %.2f s (%.0f events/s, %.2f × ceiling), peak RSS %.1f MiB, CPU %.2f s",
		mode, d.RelaySec, d.RelayRate(), d.Ratio(), benchkit.MiB(d.PeakRSS), d.RelayCPU)
	if d.Published < float64(n) {
		return d, fmt.Errorf("the slot was confirmed past the backlog but the relay acknowledged only %.0f of %d events", d.Published, n)
	}
	if d.Published > float64(n) {
		d.Notes = append(d.Notes, fmt.Sprintf("%.0f events published for %d rows (redeliveries)", d.Published, n))
	}
	if !b.pgStartTime(ctx).Equal(pgStart) {
		d.Notes = append(d.Notes, "PostgreSQL restarted during this measurement (someone else's chaos test?): rerun")
	}
	return d, nil
}

// relayStats reads the relay's counters, peak RSS and CPU time.
func (b *bench) relayStats(ctx context.Context, r *relayProc, s *relayStats) error {
	m, err := r.scrape(ctx)
	if err != nil {
		return fmt.Errorf("scrape relay metrics: %w", err)
	}
	s.Published = m.sum(mPublished)
	s.Decoded = m.sum(mDecoded)
	s.Reconnects = m.value(mStarts) - 1
	s.ConcurrentTxnRetries = m.concurrentTxn()
	s.PublishErrors = m.sum(mPubErrors) - s.ConcurrentTxnRetries
	if s.PeakRSS, _, err = benchkit.ProcMem(r.pid); err != nil {
		return err
	}
	if s.RelayCPU, err = benchkit.ProcCPU(r.pid); err != nil {
		return err
	}
	if s.Reconnects > 0 || s.PublishErrors > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("relay reconnected %.0f times, %.0f publish errors: disturbed run, rerun", s.Reconnects, s.PublishErrors))
	}
	if s.ConcurrentTxnRetries > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%.0f produce retries on CONCURRENT_TRANSACTIONS (the coordinator was still completing the previous transaction)", s.ConcurrentTxnRetries))
	}
	return nil
}

// ceiling runs pg_recvlogical on the ceiling slot up to lsn and times it.
func (b *bench) ceiling(ctx context.Context, t *target, lsn pglogrepl.LSN, d *drainResult) error {
	ws := b.watchWalsender(ctx, t.ceiling)
	cctx, cancel := context.WithTimeout(ctx, drainTimeout(d.Events))
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(b.cfg.PGBin, "pg_recvlogical"),
		"-d", b.cfg.DatabaseURL, "--slot", t.ceiling, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+t.pub,
		"--endpos", lsn.String(), "--no-loop", "-f", "/dev/null", "-v")
	cmd.WaitDelay = 5 * time.Second
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	el := time.Since(t0)
	d.CeilingWalsenderCPU = ws.seconds()
	_ = os.WriteFile(filepath.Join(b.cfg.LogDir, "pg_recvlogical-"+t.tag+".log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("pg_recvlogical: %w: %s", err, lastLines(string(out), 5))
	}
	if !strings.Contains(string(out), "reached") {
		return fmt.Errorf("pg_recvlogical exited without reaching --endpos %s: %s", lsn, lastLines(string(out), 5))
	}
	d.CeilingSec = el.Seconds()
	if ps := cmd.ProcessState; ps != nil {
		d.CeilingClientCPU = (ps.UserTime() + ps.SystemTime()).Seconds()
	}
	return nil
}

// warmBroker sends N records through ProducerPerformance, unmeasured, so
// the drains do not run against a cold broker when the Kafka ceiling
// phase (which warms it too) is not selected.
func (b *bench) warmBroker(ctx context.Context) error {
	topic := b.prefix + "_perf"
	if err := b.createTopic(ctx, topic); err != nil {
		return err
	}
	b.logf("broker warm-up: ProducerPerformance, %d records (unmeasured; -warmup=false skips it)", b.cfg.N)
	_, err := b.producerPerf(ctx, topic, b.cfg.N, -1, "warmup")
	return err
}

func (b *bench) kafkaCeiling(ctx context.Context) (*kafkaResult, error) {
	topic := b.prefix + "_perf"
	if err := b.createTopic(ctx, topic); err != nil {
		return nil, err
	}
	k := &kafkaResult{}
	b.logf("kafka ceiling: ProducerPerformance, %d records of 300 bytes, as fast as possible", b.cfg.N)
	var err error
	if k.Max, err = b.producerPerf(ctx, topic, b.cfg.N, -1, "max"); err != nil {
		return nil, err
	}
	b.logf("kafka ceiling: %s", k.Max.Line)
	if b.cfg.KafkaRate > 0 {
		records := int(float64(b.cfg.KafkaRate) * b.cfg.Duration.Seconds())
		b.logf("kafka ceiling: ProducerPerformance, %d records at %d/s", records, b.cfg.KafkaRate)
		if k.Fixed, err = b.producerPerf(ctx, topic, records, b.cfg.KafkaRate, "fixed"); err != nil {
			return k, err
		}
		b.logf("kafka ceiling: %s", k.Fixed.Line)
	}
	return k, nil
}

// writerStats describes one latency window's writers.
type writerStats struct {
	start, end time.Time
	committed  int64 // events
	txs        int64 // transactions
	errors     int64
	workers    int
	maxLate    time.Duration
	firstErr   error
	commitLat  []float64 // seconds, per committed insert (round trip incl. WAL flush)
}

var seq atomic.Int64

// runWriter commits transactions of txSize events at rate events/s for
// dur, from enough connections to absorb the commit (fsync) latency.
// Transaction k is due at start + k·txSize/rate; a late writer does not
// skip any, so a writer that cannot keep up shows as a lower achieved rate.
func (b *bench) runWriter(ctx context.Context, t *target, rate, txSize int, dur time.Duration) (*writerStats, error) {
	txSize = max(txSize, 1)
	txRate := max(rate/txSize, 1)
	w := &writerStats{workers: max(4, min(48, txRate/400))}
	sql := fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
SELECT gen_random_uuid(), 'bench', 'agg-' || (j %% 1000), j, 'bench.created', 1, %s FROM generate_series($1::bigint, $1::bigint + %d) AS j`,
		t.table, payloadSQL("j"), txSize-1)
	conns := make([]*pgx.Conn, w.workers)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	for i := range conns {
		c, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
		if err != nil {
			return nil, err
		}
		conns[i] = c
		if _, err := c.Prepare(ctx, "ins", sql); err != nil {
			return nil, err
		}
	}
	total := int64(float64(txRate) * dur.Seconds())
	interval := float64(time.Second) / float64(txRate)
	base := seq.Add(total*int64(txSize)) - total*int64(txSize)
	var next atomic.Int64
	var mu sync.Mutex
	w.start = time.Now().Add(20 * time.Millisecond)
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var late time.Duration
			var lat []float64
			for ctx.Err() == nil {
				k := next.Add(1) - 1
				if k >= total {
					break
				}
				due := w.start.Add(time.Duration(float64(k) * interval))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				} else {
					late = max(late, -d)
				}
				t0 := time.Now()
				if _, err := c.Exec(ctx, "ins", base+k*int64(txSize)); err != nil {
					mu.Lock()
					w.errors++
					if w.firstErr == nil {
						w.firstErr = err
					}
					mu.Unlock()
					if ctx.Err() == nil {
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				lat = append(lat, time.Since(t0).Seconds())
				atomic.AddInt64(&w.committed, int64(txSize))
				atomic.AddInt64(&w.txs, 1)
			}
			mu.Lock()
			w.commitLat = append(w.commitLat, lat...)
			w.maxLate = max(w.maxLate, late)
			mu.Unlock()
		}()
	}
	wg.Wait()
	w.end = time.Now()
	if ctx.Err() != nil {
		return w, ctx.Err()
	}
	return w, nil
}

// latency runs the fixed-rate windows against one caught-up relay. With a
// registry format it also decodes the first records the consumer
// received (checkDecodable); the decodeResult is nil for native.
func (b *bench) latency(ctx context.Context) ([]latencyResult, *decodeResult, error) {
	tag := b.variant.tag(b.round)
	b.logf("latency (%s): migrate and start the relay", b.variant)
	t, err := b.newTarget(ctx, "lat"+tag, false)
	if err != nil {
		return nil, nil, err
	}
	r, err := b.startRelay(t, "latency"+tag)
	if err != nil {
		return nil, nil, err
	}
	defer r.stop()
	if err := r.waitReady(ctx, time.Minute); err != nil {
		return nil, nil, err
	}
	c, err := b.startConsumer(ctx, b.topicFor(b.variant.Format))
	if err != nil {
		return nil, nil, err
	}
	defer c.close()
	// Warm-up: topic metadata, partition lanes, broker connections.
	w, err := b.runWriter(ctx, t, 200, 1, 2*time.Second)
	if err != nil {
		return nil, nil, fmt.Errorf("warm-up writer: %w", err)
	}
	published := float64(w.committed)
	if _, err := r.waitPublished(ctx, published, time.Minute); err != nil {
		return nil, nil, fmt.Errorf("warm-up: %w", err)
	}
	var out []latencyResult
	for _, txSize := range b.cfg.LatencyTx {
		for _, rate := range b.cfg.Rates {
			if ctx.Err() != nil {
				break
			}
			l, err := b.latencyWindow(ctx, t, r, c, rate, txSize, &published)
			if err != nil {
				return out, nil, err
			}
			out = append(out, l)
		}
	}
	if err := r.stop(); err != nil {
		b.logf("latency: relay stop: %v", err)
	}
	if !b.variant.registry() {
		return out, nil, nil
	}
	kept := c.kept()
	dec := &decodeResult{Checked: len(kept)}
	if err := b.checkDecodable(ctx, b.variant.Format, kept); err != nil {
		dec.Error = err.Error()
		return out, dec, fmt.Errorf("%s records not decodable: %w", b.variant.Format, err)
	}
	b.logf("latency (%s): %d records decoded with their registered schema, every field equal to the row's payload", b.variant, len(kept))
	return out, dec, nil
}

// latencyWindow offers rate events/s in transactions of txSize events for
// the configured duration and measures them; published is the relay's
// expected events_published_total, advanced by the window.
func (b *bench) latencyWindow(ctx context.Context, t *target, r *relayProc, c *consumer, rate, txSize int, published *float64) (latencyResult, error) {
	time.Sleep(time.Second)
	pgStart := b.pgStartTime(ctx)
	m0, err := r.scrape(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	cpu0, _ := benchkit.ProcCPU(r.pid)
	others0 := b.otherCPU(ctx, t.slot)
	b.logf("latency: %d events/s in %d-event transactions for %s", rate, txSize, b.cfg.Duration)
	profiled := b.profileWindow(ctx, r, fmt.Sprintf("%d-tx%d%s", rate, txSize, b.variant.tag(b.round)))
	w, err := b.runWriter(ctx, t, rate, txSize, b.cfg.Duration)
	profiled()
	if err != nil {
		return latencyResult{}, fmt.Errorf("writer at %d events/s: %w", rate, err)
	}
	l := latencyResult{Target: rate, TxSize: txSize, Committed: w.committed, Workers: w.workers, WriterErrors: w.errors,
		Achieved: float64(w.committed) / w.end.Sub(w.start).Seconds(), MaxLateMs: ms(w.maxLate.Seconds())}
	l.Held = l.Achieved >= 0.95*float64(rate)
	slices.Sort(w.commitLat)
	l.InsertP50, l.InsertP99 = ms(percentile(w.commitLat, 0.5)), ms(percentile(w.commitLat, 0.99))
	if w.firstErr != nil {
		l.Notes = append(l.Notes, fmt.Sprintf("%d inserts failed, first: %v", w.errors, w.firstErr))
	}
	*published += float64(w.committed)
	if _, err := r.waitPublished(ctx, *published, time.Minute+b.cfg.Duration); err != nil {
		return latencyResult{}, fmt.Errorf("at %d events/s: %w", rate, err)
	}
	// The consumer needs a moment longer than the ack.
	var lat []float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		lat = c.window(w.start, w.end)
		if int64(len(lat)) >= w.committed || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	m1, err := r.scrape(ctx)
	if err != nil {
		return latencyResult{}, err
	}
	cpu1, _ := benchkit.ProcCPU(r.pid)
	others1 := b.otherCPU(ctx, t.slot)
	l.BrokerCPUPer100k = others1.per100k(others0, "broker", w.committed)
	l.WalsenderCPUPer100k = others1.per100k(others0, "walsender", w.committed)
	l.setConsumer(lat)
	l.txStats = txDiff(m1, m0)
	l.setHistogram(diffBuckets(m1.histogram(mCommitToAck), m0.histogram(mCommitToAck)))
	l.setDecode(diffBuckets(m1.histogram(mCommitToDec), m0.histogram(mCommitToDec)))
	l.RelayCPUPer100k = (cpu1 - cpu0) / float64(max(w.committed, 1)) * 1e5
	if n := m1.value(mStarts) - m0.value(mStarts); n > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("relay reconnected %.0f times: disturbed window, rerun", n))
	}
	cc := m1.concurrentTxn() - m0.concurrentTxn()
	if e := m1.sum(mPubErrors) - m0.sum(mPubErrors) - cc; e > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("%.0f publish errors: disturbed window, rerun", e))
	}
	if cc > 0 {
		l.Notes = append(l.Notes, fmt.Sprintf("%.0f produce retries on CONCURRENT_TRANSACTIONS (the coordinator was still completing the previous transaction)", cc))
	}
	if !b.pgStartTime(ctx).Equal(pgStart) {
		l.Notes = append(l.Notes, "PostgreSQL restarted during this window: rerun")
	}
	if !l.Held {
		l.Notes = append(l.Notes, fmt.Sprintf("the writer could not keep up: %.0f of %d events/s (max lateness %.0f ms)", l.Achieved, rate, l.MaxLateMs))
	}
	b.logf("latency: %d events/s, %d-event tx (achieved %.0f): receipt p50 %.1f p99 %.1f p99.9 %.1f ms; ack p99 ≈ %.1f ms, decode p99 ≈ %.1f ms (histograms); %d samples",
		rate, txSize, l.Achieved, l.ConsP50, l.ConsP99, l.ConsP999, l.HistP99, l.DecodeP99, l.Samples)
	return l, nil
}

// cpuSample is the CPU seconds of the processes beside the relay that a
// latency window loads: the Kafka broker (when local) and the slot's WAL
// sender, by pid, so a restarted process is not mistaken for a busy one.
type cpuSample map[string][2]float64 // name → {pid, seconds}

func (b *bench) otherCPU(ctx context.Context, slot string) cpuSample {
	s := cpuSample{}
	if pid := listenerPID(b.cfg.Brokers[0]); pid > 0 {
		if cpu, err := benchkit.ProcCPU(pid); err == nil {
			s["broker"] = [2]float64{float64(pid), cpu}
		}
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if _, pid, err := b.slotInfo(qctx, slot); err == nil && pid > 0 {
		if cpu, err := benchkit.ProcCPU(pid); err == nil {
			s["walsender"] = [2]float64{float64(pid), cpu}
		}
	}
	return s
}

// per100k is name's CPU seconds since before, per 100k events; 0 when not
// measured in both samples by the same process.
func (s cpuSample) per100k(before cpuSample, name string, events int64) float64 {
	a, ok1 := before[name]
	z, ok2 := s[name]
	if !ok1 || !ok2 || a[0] != z[0] || events <= 0 {
		return 0
	}
	return (z[1] - a[1]) / float64(events) * 1e5
}

// profileWindow starts a CPU profile of the relay covering the coming
// latency window (when -pprof is set); the returned func waits for it and
// saves the allocation profile too.
func (b *bench) profileWindow(ctx context.Context, r *relayProc, name string) func() {
	if !b.cfg.PProf {
		return func() {}
	}
	secs := max(1, int(b.cfg.Duration.Seconds())-1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		path := filepath.Join(b.cfg.LogDir, "cpu-"+name+".pprof")
		if err := r.profile(ctx, fmt.Sprintf("profile?seconds=%d", secs), path); err != nil {
			b.logf("latency: CPU profile %s: %v", name, err)
		}
	}()
	return func() {
		<-done
		path := filepath.Join(b.cfg.LogDir, "allocs-"+name+".pprof")
		if err := r.profile(ctx, "allocs", path); err != nil {
			b.logf("latency: allocation profile %s: %v", name, err)
		}
	}
}

// profileDrain starts a CPU profile of the relay for as long as the
// ceiling took (so it ends inside the relay's drain when the relay is
// slower than the ceiling, which is the case worth looking at), when
// -pprof is set; the returned func waits for it.
func (b *bench) profileDrain(ctx context.Context, r *relayProc, tag string, ceilingSec float64) func() {
	if !b.cfg.PProf {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.waitReady(ctx, time.Minute); err != nil {
			return
		}
		path := filepath.Join(b.cfg.LogDir, "cpu-drain-"+tag+".pprof")
		secs := max(1, int(ceilingSec))
		if err := r.profile(ctx, fmt.Sprintf("profile?seconds=%d", secs), path); err != nil {
			b.logf("drain: CPU profile: %v", err)
		}
	}()
	return func() { <-done }
}

func diffBuckets(after, before []bucket) []bucket {
	out := slices.Clone(after)
	for i := range out {
		for _, bb := range before {
			if bb.LE == out[i].LE {
				out[i].Count -= bb.Count
			}
		}
	}
	return out
}

// bigTx relays one transaction of cfg.BigTx rows through a fresh relay and
// records its peak RSS.
func (b *bench) bigTx(ctx context.Context) (*bigTxResult, error) {
	rows := b.cfg.BigTx
	bt := &bigTxResult{Rows: rows}
	b.logf("large transaction: migrate and start the relay")
	t, err := b.newTarget(ctx, "big", false)
	if err != nil {
		return nil, err
	}
	r, err := b.startRelay(t, "bigtx")
	if err != nil {
		return nil, err
	}
	defer r.stop()
	if err := r.waitReady(ctx, time.Minute); err != nil {
		return nil, err
	}
	pgStart := b.pgStartTime(ctx)
	bt.BaselineRSS, _, _ = benchkit.ProcMem(r.pid)
	cpu0, _ := benchkit.ProcCPU(r.pid)
	ws := b.watchWalsender(ctx, t.slot)
	conn, err := pgx.Connect(ctx, b.cfg.DatabaseURL)
	if err != nil {
		return bt, err
	}
	defer conn.Close(context.Background())
	from, _ := b.walInsertLSN(ctx)
	b.logf("large transaction: INSERT ... SELECT generate_series(1, %d) in one transaction", rows)
	t0 := time.Now()
	if _, err := conn.Exec(ctx, insertSQL(t.table, "1", strconv.Itoa(rows))); err != nil {
		return bt, fmt.Errorf("insert: %w", err)
	}
	committed := time.Now()
	bt.InsertSec = committed.Sub(t0).Seconds()
	lsn, _ := b.walInsertLSN(ctx)
	bt.WALBytes = int64(lsn - from)
	doneAt, err := r.waitPublished(ctx, float64(rows), drainTimeout(rows))
	bt.WalsenderCPU = ws.seconds()
	if err != nil {
		return bt, err
	}
	bt.DrainSec = doneAt.Sub(committed).Seconds()
	if _, err := b.waitConfirmed(ctx, t.slot, lsn, 30*time.Second, r.alive); err == nil {
		bt.Confirmed = true
	}
	if err := b.relayStats(ctx, r, &bt.relayStats); err != nil {
		return bt, err
	}
	bt.RelayCPU -= cpu0
	if err := r.stop(); err != nil {
		bt.Notes = append(bt.Notes, "relay stop: "+err.Error())
	}
	if !b.pgStartTime(ctx).Equal(pgStart) {
		bt.Notes = append(bt.Notes, "PostgreSQL restarted during this measurement: rerun")
	}
	b.logf("large transaction: inserted in %.1f s, relayed %.1f s after commit, peak RSS %.1f MiB", bt.InsertSec, bt.DrainSec, benchkit.MiB(bt.PeakRSS))
	if !bt.Confirmed {
		return bt, errors.New("the slot was not confirmed past the large transaction within 30 s of its last acknowledgement")
	}
	return bt, nil
}
