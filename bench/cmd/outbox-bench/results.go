package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"time"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// Targets (docs/benchmarks.md).
const (
	targetDrainRatio = 0.9
	targetP99Rate    = 5000
	targetP99        = 0.025 // seconds, commit-to-ack
	targetDrainRSS   = 64 << 20
	targetBigTxRSS   = 128 << 20
)

type results struct {
	RunID    string          `json:"run_id"`
	Started  time.Time       `json:"started"`
	Finished time.Time       `json:"finished"`
	Host     benchkit.Host   `json:"host"`
	Config   string          `json:"config"`
	Drains   []drainResult   `json:"drains"`
	Kafka    *kafkaResult    `json:"kafka,omitempty"`
	Latency  []latencyResult `json:"latency"`
	// LatencyCeiling is pg_recvlogical's commit-to-receipt at the same rates.
	LatencyCeiling []replicationCeiling `json:"latency_ceiling"`
	BigTx          *bigTxResult         `json:"big_tx,omitempty"`
	// Decodes are the registry formats' records read back (checkDecodable).
	Decodes []decodeResult `json:"decodes,omitempty"`
	Errors  []string       `json:"errors"`
	Notes   []string       `json:"notes"`
	PNGPath string         `json:"png,omitempty"`
}

// relayStats is what a relay process reports at the end of a phase.
type relayStats struct {
	Published            float64  `json:"published"`
	Decoded              float64  `json:"decoded"`
	Reconnects           float64  `json:"reconnects"`
	PublishErrors        float64  `json:"publish_errors"`
	ConcurrentTxnRetries float64  `json:"concurrent_transactions_retries,omitempty"`
	PeakRSS              int64    `json:"peak_rss_bytes"`
	RelayCPU             float64  `json:"relay_cpu_s"`
	Notes                []string `json:"notes,omitempty"`
}

type drainResult struct {
	Mode                int     `json:"events_per_tx"`
	Events              int     `json:"events"`
	PayloadBytes        float64 `json:"payload_bytes"`
	WALBytes            int64   `json:"wal_bytes"`
	EndLSN              string  `json:"end_lsn"`
	PreloadSec          float64 `json:"preload_s"`
	CeilingSec          float64 `json:"ceiling_s"`
	CeilingWalsenderCPU float64 `json:"ceiling_walsender_cpu_s"`
	CeilingClientCPU    float64 `json:"ceiling_client_cpu_s"`
	RelaySec            float64 `json:"relay_s"`
	RelayStartupSec     float64 `json:"relay_startup_s"`
	RelayWalsenderCPU   float64 `json:"relay_walsender_cpu_s"`
	variant
	Round int `json:"round,omitempty"`
	txStats
	relayStats
}

func (d drainResult) CeilingRate() float64 { return rate(d.Events, d.CeilingSec) }
func (d drainResult) RelayRate() float64   { return rate(d.Events, d.RelaySec) }
func (d drainResult) Ratio() float64 {
	if d.CeilingSec <= 0 || d.RelaySec <= 0 {
		return math.NaN()
	}
	return d.CeilingSec / d.RelaySec
}
func (d drainResult) complete() bool { return d.CeilingSec > 0 && d.RelaySec > 0 && d.PeakRSS > 0 }

type kafkaResult struct {
	Max   *perfResult `json:"max"`
	Fixed *perfResult `json:"fixed,omitempty"`
}

type latencyResult struct {
	Target       int     `json:"target_rate"`
	TxSize       int     `json:"events_per_tx"`
	Achieved     float64 `json:"achieved_rate"`
	Held         bool    `json:"held"`
	Committed    int64   `json:"committed"`
	Workers      int     `json:"writer_connections"`
	WriterErrors int64   `json:"writer_errors"`
	MaxLateMs    float64 `json:"writer_max_late_ms"`
	InsertP50    float64 `json:"insert_commit_p50_ms"`
	InsertP99    float64 `json:"insert_commit_p99_ms"`

	// Commit → consumer receipt, exact percentiles of every sample (ms).
	Samples  int       `json:"samples"`
	ConsP50  float64   `json:"receipt_p50_ms"`
	ConsP99  float64   `json:"receipt_p99_ms"`
	ConsP999 float64   `json:"receipt_p999_ms"`
	ConsMax  float64   `json:"receipt_max_ms"`
	CDF      []float64 `json:"receipt_quantiles_ms"` // 0.1 % steps, for the plot

	// Commit → ack from the relay's histogram, interpolated (ms).
	Buckets      []bucket `json:"ack_buckets"`
	HistCount    float64  `json:"ack_count"`
	HistP50      float64  `json:"ack_p50_ms"`
	HistP99      float64  `json:"ack_p99_ms"`
	HistP999     float64  `json:"ack_p999_ms"`
	HistP99Range string   `json:"ack_p99_bucket"`
	HistUnder25  float64  `json:"ack_fraction_le_25ms"`

	// Commit → decode (the replication part of commit → ack), from the
	// relay's commit_to_decode_seconds histogram, interpolated (ms).
	DecodeP50 float64 `json:"decode_p50_ms"`
	DecodeP99 float64 `json:"decode_p99_ms"`

	RelayCPUPer100k     float64 `json:"relay_cpu_s_per_100k"`
	BrokerCPUPer100k    float64 `json:"broker_cpu_s_per_100k"`
	WalsenderCPUPer100k float64 `json:"walsender_cpu_s_per_100k"`
	variant
	Round int `json:"round,omitempty"`
	txStats
	Notes []string `json:"notes,omitempty"`
}

type bigTxResult struct {
	Rows         int     `json:"rows"`
	WALBytes     int64   `json:"wal_bytes"`
	InsertSec    float64 `json:"insert_s"`
	DrainSec     float64 `json:"relay_after_commit_s"`
	WalsenderCPU float64 `json:"walsender_cpu_s"`
	BaselineRSS  int64   `json:"baseline_rss_bytes"`
	Confirmed    bool    `json:"confirmed"`
	relayStats
}

func rate(n int, sec float64) float64 {
	if sec <= 0 {
		return math.NaN()
	}
	return float64(n) / sec
}

func ms(sec float64) float64 { return sec * 1000 }

// percentile is the nearest-rank percentile of sorted values.
func percentile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// label names the window: its offered rate and transaction size.
func (d *drainResult) modeLabel() string {
	if d.Delivery == "" {
		return fmt.Sprint(d.Mode)
	}
	return fmt.Sprintf("%d (%s, round %d)", d.Mode, d.variant, d.Round)
}

// checkSuffix names a drain's relay variant and round in a target's
// line, unless it is the default relay's only round (whose lines read as
// they always did).
func (d *drainResult) checkSuffix() string {
	if d.short() == "" && d.Round <= 1 {
		return ""
	}
	return fmt.Sprintf(" (%s, round %d)", d.variant, d.Round)
}

func (l *latencyResult) label() string {
	s := fmt.Sprintf("%s events/s in %d-event transactions", benchkit.Num(float64(l.Target)), max(l.TxSize, 1))
	if l.Delivery != "" {
		s += fmt.Sprintf(", %s (round %d)", l.variant, l.Round)
	}
	return s
}

func (l *latencyResult) setConsumer(lat []float64) {
	sort.Float64s(lat)
	l.Samples = len(lat)
	if len(lat) == 0 {
		return
	}
	l.ConsP50 = ms(percentile(lat, 0.50))
	l.ConsP99 = ms(percentile(lat, 0.99))
	l.ConsP999 = ms(percentile(lat, 0.999))
	l.ConsMax = ms(lat[len(lat)-1])
	l.CDF = make([]float64, 1000)
	for i := range l.CDF {
		l.CDF[i] = ms(percentile(lat, float64(i+1)/1000))
	}
}

func (l *latencyResult) setHistogram(b []bucket) {
	l.Buckets = b
	if len(b) == 0 || b[len(b)-1].Count <= 0 {
		return
	}
	l.HistCount = b[len(b)-1].Count
	l.HistP50, _, _ = histQuantile(b, 0.50)
	var lo, hi float64
	l.HistP99, lo, hi = histQuantile(b, 0.99)
	l.HistP999, _, _ = histQuantile(b, 0.999)
	l.HistP50, l.HistP99, l.HistP999 = ms(l.HistP50), ms(l.HistP99), ms(l.HistP999)
	l.HistP99Range = fmt.Sprintf("%g–%g ms", ms(lo), ms(hi))
	for _, bk := range b {
		if bk.LE == targetP99 {
			l.HistUnder25 = bk.Count / l.HistCount
		}
	}
}

func (l *latencyResult) setDecode(b []bucket) {
	if len(b) == 0 || b[len(b)-1].Count <= 0 {
		return
	}
	p50, _, _ := histQuantile(b, 0.50)
	p99, _, _ := histQuantile(b, 0.99)
	l.DecodeP50, l.DecodeP99 = ms(p50), ms(p99)
}

// histQuantile interpolates quantile q linearly inside its bucket, as
// Prometheus' histogram_quantile does; lo and hi are the bucket's bounds.
// A quantile in the +Inf bucket returns the highest finite bound.
func histQuantile(b []bucket, q float64) (v, lo, hi float64) {
	if len(b) == 0 || b[len(b)-1].Count <= 0 {
		return math.NaN(), math.NaN(), math.NaN()
	}
	rank := q * b[len(b)-1].Count
	prevLE, prevCount := 0.0, 0.0
	for _, bk := range b {
		if bk.Count >= rank {
			if math.IsInf(bk.LE, 1) {
				return prevLE, prevLE, bk.LE
			}
			if bk.Count == prevCount {
				return bk.LE, prevLE, bk.LE
			}
			return prevLE + (bk.LE-prevLE)*(rank-prevCount)/(bk.Count-prevCount), prevLE, bk.LE
		}
		prevLE, prevCount = bk.LE, bk.Count
	}
	return prevLE, prevLE, math.Inf(1)
}

// check is one target line.
type check struct {
	Pass   bool
	Name   string
	Detail string
}

func (c check) String() string {
	s := "FAIL"
	if c.Pass {
		s = "PASS"
	}
	return fmt.Sprintf("%s %s: %s", s, c.Name, c.Detail)
}

func (r *results) checks() []check {
	var out []check
	for _, d := range r.Drains {
		c := check{Name: fmt.Sprintf("drain, %d-event transactions%s ≥ %.1f × pg_recvlogical", d.Mode, d.checkSuffix(), targetDrainRatio)}
		if d.CeilingSec > 0 && d.RelaySec > 0 {
			c.Pass = d.Ratio() >= targetDrainRatio
			c.Detail = fmt.Sprintf("%.2f × (relay %.0f events/s, pg_recvlogical %.0f events/s)", d.Ratio(), d.RelayRate(), d.CeilingRate())
		} else {
			c.Detail = "not measured (phase failed)"
		}
		out = append(out, c)
	}
	if len(r.Drains) > 0 {
		c := check{Name: fmt.Sprintf("peak RSS during the drain ≤ %d MiB", targetDrainRSS>>20)}
		peak, at := int64(0), drainResult{}
		for _, d := range r.Drains {
			if d.PeakRSS > peak {
				peak, at = d.PeakRSS, d
			}
		}
		c.Pass = peak > 0 && peak <= targetDrainRSS
		c.Detail = fmt.Sprintf("%.1f MiB (VmHWM)", benchkit.MiB(peak))
		if at.registry() {
			// Not a native relay's peak: name the drain, so the target
			// is read against the right relay.
			c.Detail = fmt.Sprintf("%.1f MiB (VmHWM, the drain of %d-event transactions%s)", benchkit.MiB(peak), at.Mode, at.checkSuffix())
		}
		if peak == 0 {
			c.Detail = "not measured"
		}
		out = append(out, c)
	}
	for _, l := range r.Latency {
		if l.Target != targetP99Rate {
			continue
		}
		c := check{Name: fmt.Sprintf("p99 commit-to-ack ≤ %.0f ms at %d events/s, %d-event transactions", ms(targetP99), targetP99Rate, l.TxSize)}
		c.Pass = l.HistCount > 0 && l.HistUnder25 >= 0.99 && l.Held
		c.Detail = fmt.Sprintf("%.2f %% of %.0f acks within 25 ms (histogram bucket, exact); p99 ≈ %.1f ms interpolated in the %s bucket; consumer receipt p99 %.1f ms",
			100*l.HistUnder25, l.HistCount, l.HistP99, l.HistP99Range, l.ConsP99)
		if !l.Held {
			c.Detail += fmt.Sprintf("; the writer reached only %.0f events/s", l.Achieved)
		}
		for _, rc := range r.LatencyCeiling {
			if rc.Target == l.Target && rc.TxSize == l.TxSize && rc.Samples > 0 {
				c.Detail += fmt.Sprintf("; replication ceiling (pg_recvlogical alone) p99 %.1f ms", rc.P99)
				if !c.Pass && rc.P99 > ms(targetP99) {
					c.Detail += " — bound by PostgreSQL on this machine: its own delivery to a reader that does nothing else misses the target"
				}
			}
		}
		out = append(out, c)
	}
	out = append(out, r.deliveryChecks()...)
	out = append(out, r.formatChecks()...)
	if r.BigTx != nil {
		c := check{Name: fmt.Sprintf("peak RSS through a %d-row transaction ≤ %d MiB", r.BigTx.Rows, targetBigTxRSS>>20)}
		c.Pass = r.BigTx.PeakRSS > 0 && r.BigTx.PeakRSS <= targetBigTxRSS && r.BigTx.Published >= float64(r.BigTx.Rows)
		c.Detail = fmt.Sprintf("%.1f MiB (VmHWM)", benchkit.MiB(r.BigTx.PeakRSS))
		if r.BigTx.PeakRSS == 0 {
			c.Detail = "not measured (phase failed)"
		}
		out = append(out, c)
	}
	return out
}

func (r *results) allPass() bool {
	if len(r.Errors) > 0 {
		return false
	}
	for _, c := range r.checks() {
		if !c.Pass {
			return false
		}
	}
	return true
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}
