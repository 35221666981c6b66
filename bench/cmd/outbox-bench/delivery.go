package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// The relay's --delivery values the bench runs (-delivery).
const (
	deliveryALO = "at-least-once"
	deliveryEOS = "exactly-once"
)

// Targets of exactly-once against at-least-once (issue 29).
const (
	targetEOSDrainRatio = 0.7  // exactly-once drain ≥ 0.7 × at-least-once
	targetEOSP99Rate    = 1000 // events/s of the latency target
	targetEOSIntervalMs = 100  // the relay's default --transaction-interval
	targetEOSSlackMs    = 50   // p99 ≤ interval + slack
)

const (
	mTxCommit = "outbox_relay_transaction_commit_seconds"
	mTxEvents = "outbox_relay_transaction_events"
)

// txStats is what the relay's Kafka transactions cost in a measurement
// (exactly-once only; zero with at-least-once): commits, the mean commit
// time (EndTxn round trip, from the relay's histogram) and events per
// transaction.
type txStats struct {
	TxCommits      float64 `json:"tx_commits,omitempty"`
	TxCommitMeanMs float64 `json:"tx_commit_mean_ms,omitempty"`
	TxEventsMean   float64 `json:"tx_events_mean,omitempty"`
}

func txDiff(after, before metrics) txStats {
	d := func(name string) float64 { return after.sum(name) - before.sum(name) }
	var s txStats
	if s.TxCommits = d(mTxCommit + "_count"); s.TxCommits > 0 {
		s.TxCommitMeanMs = ms(d(mTxCommit+"_sum") / s.TxCommits)
	}
	if n := d(mTxEvents + "_count"); n > 0 {
		s.TxEventsMean = d(mTxEvents+"_sum") / n
	}
	return s
}

// concurrentTxn is the publish errors with reason concurrent_transactions:
// an exactly-once relay's produce that reached the partition while the
// coordinator was still completing the previous transaction, retried.
func (m metrics) concurrentTxn() float64 {
	t := 0.0
	for k, v := range m {
		if seriesName(k) == mPubErrors && strings.Contains(k, `reason="concurrent_transactions"`) {
			t += v
		}
	}
	return t
}

func (r *results) deliveries() []string {
	var out []string
	for _, d := range r.Drains {
		if d.Delivery != "" && !slices.Contains(out, d.Delivery) {
			out = append(out, d.Delivery)
		}
	}
	for _, l := range r.Latency {
		if l.Delivery != "" && !slices.Contains(out, l.Delivery) {
			out = append(out, l.Delivery)
		}
	}
	return out
}

func meanOf(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	t := 0.0
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// drainRates is the relay's events/s of every complete drain of mode by
// the relay variant v, in run order.
func (r *results) drainRates(mode int, v variant) []float64 {
	var out []float64
	for _, d := range r.drains(mode, v) {
		out = append(out, d.RelayRate())
	}
	return out
}

// drains are the complete drains of mode by the relay variant v, in run
// order.
func (r *results) drains(mode int, v variant) []drainResult {
	var out []drainResult
	for _, d := range r.Drains {
		if d.Mode == mode && d.variant == v && d.RelaySec > 0 {
			out = append(out, d)
		}
	}
	return out
}

// latencies are the measured windows at rate in transactions of txSize
// events by the relay variant v, in run order.
func (r *results) latencies(rate, txSize int, v variant) []latencyResult {
	var out []latencyResult
	for _, l := range r.Latency {
		if l.Target == rate && l.TxSize == txSize && l.variant == v && l.Samples > 0 {
			out = append(out, l)
		}
	}
	return out
}

func (r *results) bothDeliveries() bool {
	d := r.deliveries()
	return slices.Contains(d, deliveryALO) && slices.Contains(d, deliveryEOS)
}

// deliveryChecks are the exactly-once targets, when both deliveries ran.
func (r *results) deliveryChecks() []check {
	if !r.bothDeliveries() {
		return nil
	}
	// The native relays of each delivery: a -formats run's registry
	// formats are renderFormats'.
	alo, eos := variant{Delivery: deliveryALO}, variant{Delivery: deliveryEOS}
	var out []check
	for _, mode := range uniqueModes(r.Drains) {
		a, e := meanOf(r.drainRates(mode, alo)), meanOf(r.drainRates(mode, eos))
		c := check{Name: fmt.Sprintf("drain, %d-event transactions: exactly-once ≥ %.0f %% of at-least-once", mode, 100*targetEOSDrainRatio)}
		if a > 0 && e > 0 {
			c.Pass = e/a >= targetEOSDrainRatio
			c.Detail = fmt.Sprintf("%.0f %% (means: exactly-once %.0f, at-least-once %.0f events/s)", 100*e/a, e, a)
		} else {
			c.Detail = "not measured"
		}
		out = append(out, c)
	}
	for _, tx := range uniqueTx(r.Latency) {
		ls := r.latencies(targetEOSP99Rate, tx, eos)
		if len(ls) == 0 {
			continue
		}
		c := check{Name: fmt.Sprintf("exactly-once: p99 commit-to-visible (read_committed) ≤ %d ms at %d events/s, %d-event transactions", targetEOSIntervalMs+targetEOSSlackMs, targetEOSP99Rate, tx)}
		worst := 0.0
		var each []string
		for _, l := range ls {
			worst = max(worst, l.ConsP99)
			each = append(each, benchkit.F1(l.ConsP99))
		}
		c.Pass = worst <= targetEOSIntervalMs+targetEOSSlackMs
		c.Detail = fmt.Sprintf("worst %.1f ms (runs: %s ms)", worst, strings.Join(each, ", "))
		out = append(out, c)
	}
	return out
}

func uniqueModes(ds []drainResult) []int {
	var out []int
	for _, d := range ds {
		if !slices.Contains(out, d.Mode) {
			out = append(out, d.Mode)
		}
	}
	return out
}

func uniqueTx(ls []latencyResult) []int {
	var out []int
	for _, l := range ls {
		if !slices.Contains(out, l.TxSize) {
			out = append(out, l.TxSize)
		}
	}
	return out
}

func uniqueRates(ls []latencyResult) []int {
	var out []int
	for _, l := range ls {
		if !slices.Contains(out, l.Target) {
			out = append(out, l.Target)
		}
	}
	return out
}

func joinRates(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, benchkit.Num(x))
	}
	return strings.Join(s, ", ")
}

// renderDeliveries is the side-by-side section of -delivery both.
func renderDeliveries(r *results) string {
	if !r.bothDeliveries() {
		return ""
	}
	alo, eos := variant{Delivery: deliveryALO}, variant{Delivery: deliveryEOS}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("### Exactly-once against at-least-once\n\n")
	p("Each drain and latency measurement ran once per delivery and round, interleaved (at-least-once, exactly-once, at-least-once …), each with a fresh relay, table, slot and the same backlog size. " +
		"*visible*: commit time to receipt by a read_committed consumer (`internal/kafkafetch`), which exactly-once records reach only at their transaction's commit.\n\n")
	if len(r.Drains) > 0 {
		p("| drain | at-least-once events/s (runs) | mean | exactly-once events/s (runs) | mean | exactly-once / at-least-once | transactions: commits, mean commit, events per transaction |\n")
		p("|---|---|---:|---|---:|---:|---|\n")
		for _, mode := range uniqueModes(r.Drains) {
			a, e := r.drainRates(mode, alo), r.drainRates(mode, eos)
			var tx []string
			for _, d := range r.drains(mode, eos) {
				if d.TxCommits > 0 {
					tx = append(tx, fmt.Sprintf("%.0f, %.1f ms, %s", d.TxCommits, d.TxCommitMeanMs, benchkit.Num(d.TxEventsMean)))
				}
			}
			p("| %d-event tx | %s | %s | %s | %s | **%.0f %%** | %s |\n", mode, joinRates(a), benchkit.Num(meanOf(a)), joinRates(e), benchkit.Num(meanOf(e)),
				100*meanOf(e)/meanOf(a), strings.Join(tx, "; "))
		}
		p("\n")
	}
	if len(r.Latency) > 0 {
		p("| offered events/s | events/tx | at-least-once: visible p50 / p99 (runs) | exactly-once: visible p50 / p99 (runs) | exactly-once: mean commit, events per transaction |\n")
		p("|---:|---:|---|---|---|\n")
		for _, tx := range uniqueTx(r.Latency) {
			for _, rate := range uniqueRates(r.Latency) {
				cell := func(v variant) string {
					var s []string
					for _, l := range r.latencies(rate, tx, v) {
						s = append(s, fmt.Sprintf("%s / %s", benchkit.F1(l.ConsP50), benchkit.F1(l.ConsP99)))
					}
					if len(s) == 0 {
						return "–"
					}
					return strings.Join(s, "; ") + " ms"
				}
				var txs []string
				for _, l := range r.latencies(rate, tx, eos) {
					txs = append(txs, fmt.Sprintf("%.1f ms, %.1f", l.TxCommitMeanMs, l.TxEventsMean))
				}
				p("| %s | %d | %s | %s | %s |\n", benchkit.Num(float64(rate)), tx, cell(alo), cell(eos), strings.Join(txs, "; "))
			}
		}
		p("\n")
	}
	return w.String()
}
