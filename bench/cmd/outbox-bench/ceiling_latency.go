package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// replicationCeiling is PostgreSQL's own commit-to-receipt latency at one
// offered rate: pg_recvlogical, a client that does nothing but read,
// timestamps every COMMIT line test_decoding writes for it. No relay, no
// Kafka: it is the part of the relay's latency the relay cannot remove on
// this machine (WAL flush wake-up, the WAL sender's decoding, scheduling).
type replicationCeiling struct {
	Target   int     `json:"offered_per_s"`
	TxSize   int     `json:"events_per_tx"`
	Achieved float64 `json:"achieved_per_s"`
	Samples  int     `json:"samples"`
	P50      float64 `json:"receipt_p50_ms"`
	P99      float64 `json:"receipt_p99_ms"`
	P999     float64 `json:"receipt_p999_ms"`
	Max      float64 `json:"receipt_max_ms"`
}

// commitTimeLayouts parse the timestamp of test_decoding's
// "COMMIT <xid> (at <timestamp>)" line (include-timestamp), as
// timestamptz_to_str prints it.
var commitTimeLayouts = []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00"}

func parseCommitTime(line string) (time.Time, bool) {
	if !strings.HasPrefix(line, "COMMIT ") {
		return time.Time{}, false
	}
	i := strings.Index(line, "(at ")
	if i < 0 || !strings.HasSuffix(line, ")") {
		return time.Time{}, false
	}
	for _, layout := range commitTimeLayouts {
		if ts, err := time.Parse(layout, line[i+4:len(line)-1]); err == nil {
			return ts, true
		}
	}
	return time.Time{}, false
}

// receipts collects commit-to-receipt latencies of the commits it reads.
type receipts struct {
	mu  sync.Mutex
	lat []commitSample
}

type commitSample struct {
	commit time.Time
	lat    float64 // seconds
}

func (r *receipts) read(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		now := time.Now()
		if ts, ok := parseCommitTime(sc.Text()); ok {
			r.mu.Lock()
			r.lat = append(r.lat, commitSample{ts, now.Sub(ts).Seconds()})
			r.mu.Unlock()
		}
	}
}

func (r *receipts) window(from, to time.Time) []float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []float64
	for _, s := range r.lat {
		if !s.commit.Before(from) && s.commit.Before(to) {
			out = append(out, s.lat)
		}
	}
	return out
}

// latencyCeiling measures replicationCeiling at each rate with the same
// writer as the relay's windows, on a table of its own whose slot only
// pg_recvlogical reads; it runs before the relay starts, so the two never
// share the machine.
func (b *bench) latencyCeiling(ctx context.Context) ([]replicationCeiling, error) {
	b.logf("latency ceiling: pg_recvlogical (test_decoding) at the same rates")
	t, err := b.newTarget(ctx, "latc", false)
	if err != nil {
		return nil, err
	}
	// migrate created a pgoutput slot nobody will read: drop it so it
	// holds no WAL, and read a test_decoding slot of our own.
	if err := b.dropSlot(ctx, t.slot); err != nil {
		return nil, err
	}
	if _, err := b.pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, t.ceiling); err != nil {
		return nil, fmt.Errorf("create latency ceiling slot %s: %w", t.ceiling, err)
	}
	t.ceilingCreated = true
	defer func() {
		if err := b.dropSlot(context.WithoutCancel(ctx), t.ceiling); err == nil {
			t.ceilingCreated = false
		}
	}()

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(b.cfg.PGBin, "pg_recvlogical"),
		"-d", b.cfg.DatabaseURL, "--slot", t.ceiling, "--start",
		"-o", "include-timestamp=on", "-o", "skip-empty-xacts=on", "--no-loop", "-f", "-")
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pg_recvlogical: %w", err)
	}
	rc := &receipts{}
	readDone := make(chan struct{})
	go func() { rc.read(stdout); close(readDone) }()
	defer func() {
		cancel()
		<-readDone
		_ = cmd.Wait()
	}()

	// Warm-up, like the relay's: connections, the slot reaching the tip.
	if _, err := b.runWriter(ctx, t, 200, 1, 2*time.Second); err != nil {
		return nil, fmt.Errorf("latency ceiling warm-up: %w", err)
	}
	var out []replicationCeiling
	for _, txSize := range b.cfg.LatencyTx {
		for _, rate := range b.cfg.Rates {
			c, err := b.ceilingWindow(ctx, t, rc, readDone, &stderr, rate, txSize)
			if err != nil {
				return out, err
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// ceilingWindow offers rate events/s in transactions of txSize events and
// collects pg_recvlogical's receipts of their commits (one per transaction).
func (b *bench) ceilingWindow(ctx context.Context, t *target, rc *receipts, readDone <-chan struct{}, stderr *strings.Builder,
	rate, txSize int) (replicationCeiling, error) {
	time.Sleep(time.Second)
	w, err := b.runWriter(ctx, t, rate, txSize, b.cfg.Duration)
	if err != nil {
		return replicationCeiling{}, fmt.Errorf("latency ceiling writer at %d events/s: %w", rate, err)
	}
	var lat []float64
	for deadline := time.Now().Add(10 * time.Second); ; {
		lat = rc.window(w.start, w.end)
		if int64(len(lat)) >= w.txs || time.Now().After(deadline) {
			break
		}
		select {
		case <-readDone:
			return replicationCeiling{}, fmt.Errorf("pg_recvlogical exited: %s", lastLines(stderr.String(), 5))
		case <-time.After(50 * time.Millisecond):
		}
	}
	c := replicationCeiling{Target: rate, TxSize: txSize, Achieved: float64(w.committed) / w.end.Sub(w.start).Seconds(), Samples: len(lat)}
	sort.Float64s(lat)
	if len(lat) > 0 {
		c.P50, c.P99, c.P999 = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99)), ms(percentile(lat, 0.999))
		c.Max = ms(lat[len(lat)-1])
	}
	b.logf("latency ceiling: %d events/s, %d-event tx (achieved %.0f): pg_recvlogical receipt p50 %.1f p99 %.1f p99.9 %.1f ms; %d samples",
		rate, txSize, c.Achieved, c.P50, c.P99, c.P999, c.Samples)
	return c, nil
}
