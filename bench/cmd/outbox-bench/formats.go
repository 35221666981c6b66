package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// Targets of the registry formats against native (issue 48).
const (
	targetFormatDrainRatio = 0.9  // a registry format's drain ≥ 0.9 × native's
	targetFormatP99Rate    = 1000 // events/s of the latency target
	targetFormatP99SlackMs = 2.0  // its p99 ≤ native's + 2 ms
)

// formats are the record formats measured, in run order, native first
// when it ran.
func (r *results) formats() []string {
	var out []string
	add := func(v variant) {
		if f := v.format(); !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	for _, d := range r.Drains {
		add(d.variant)
	}
	for _, l := range r.Latency {
		add(l.variant)
	}
	return out
}

// registryFormats reports whether a registry format ran beside native,
// the condition of the side-by-side section and its checks.
func (r *results) registryFormats() bool {
	f := r.formats()
	return len(f) > 1 && slices.Contains(f, formatNative)
}

// p99Mean is the mean over runs of the consumer's p99 (exact, ms) of the
// windows at rate in transactions of tx events by v, and the runs'.
func (r *results) p99Mean(rate, tx int, v variant) (float64, []float64) {
	var each []float64
	for _, l := range r.latencies(rate, tx, v) {
		each = append(each, l.ConsP99)
	}
	return meanOf(each), each
}

// formatChecks are the registry formats' targets, when they ran beside
// native: drain ≥ 90 % of native's, p99 at 1,000 events/s within 2 ms of
// native's (means over the rounds, each delivery apart), and every
// decoded sample equal to its row.
func (r *results) formatChecks() []check {
	if !r.registryFormats() {
		return nil
	}
	var out []check
	deliveries := r.deliveries()
	for _, delivery := range deliveries {
		native := variant{Delivery: delivery}
		suffix := ""
		if len(deliveries) > 1 || delivery != deliveryALO {
			suffix = ", " + delivery
		}
		for _, f := range r.formats() {
			v := newVariant(delivery, f)
			if !v.registry() {
				continue
			}
			for _, mode := range uniqueModes(r.Drains) {
				n, e := meanOf(r.drainRates(mode, native)), meanOf(r.drainRates(mode, v))
				c := check{Name: fmt.Sprintf("drain, %d-event transactions%s: %s ≥ %.0f %% of native", mode, suffix, f, 100*targetFormatDrainRatio)}
				if n > 0 && e > 0 {
					c.Pass = e/n >= targetFormatDrainRatio
					c.Detail = fmt.Sprintf("%.0f %% (means: %s %.0f, native %.0f events/s)", 100*e/n, f, e, n)
				} else {
					c.Detail = "not measured"
				}
				out = append(out, c)
			}
			for _, tx := range uniqueTx(r.Latency) {
				n, _ := r.p99Mean(targetFormatP99Rate, tx, native)
				e, each := r.p99Mean(targetFormatP99Rate, tx, v)
				if len(each) == 0 {
					continue
				}
				c := check{Name: fmt.Sprintf("%s%s: p99 commit-to-visible at %d events/s, %d-event transactions ≤ native + %.0f ms", f, suffix, targetFormatP99Rate, tx, targetFormatP99SlackMs)}
				if n > 0 {
					c.Pass = e-n <= targetFormatP99SlackMs
					c.Detail = fmt.Sprintf("%+.1f ms (means: %s %.1f ms, native %.1f ms; %s runs: %s ms)", e-n, f, e, n, f, joinF1(each))
				} else {
					c.Detail = "native not measured"
				}
				out = append(out, c)
			}
		}
	}
	for _, d := range r.Decodes {
		c := check{Name: fmt.Sprintf("%s (round %d): records decode with their registered schema, every field equal to the row's payload", d.variant, d.Round)}
		c.Pass = d.Error == "" && d.Checked > 0
		c.Detail = fmt.Sprintf("%d records checked", d.Checked)
		if d.Error != "" {
			c.Detail += ": " + d.Error
		}
		out = append(out, c)
	}
	return out
}

func joinF1(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, benchkit.F1(x))
	}
	return strings.Join(s, ", ")
}

// renderFormats is the side-by-side section of -formats with a registry
// format beside native.
func renderFormats(r *results) string {
	if !r.registryFormats() {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("### Registry formats against native\n\n")
	p("Each drain and latency measurement ran once per format and round, interleaved (%s …), each with a fresh relay, table, slot and the same backlog size. "+
		"A registry format's relay (`--record-format F --schema-registry-url URL`) encodes every payload with the schema the bench registered as version 1 "+
		"of `<topic>-value` before it started (each format has its own topic), the registry on this machine. "+
		"*/ native*: mean drain rate over native's mean; *relay / pg_recvlogical*: the mean over runs of the relay's rate over the walsender's ceiling "+
		"on the same backlog; *CPU per event*: the relay's CPU time (start-up included for a drain) over the events. "+
		"*visible*: commit time to receipt by a read_committed consumer, exact percentiles.\n\n", strings.Join(r.formats(), ", "))
	deliveries := r.deliveries()
	label := func(head, delivery string) string {
		if len(deliveries) > 1 {
			return head + ", " + delivery
		}
		return head
	}
	if len(r.Drains) > 0 {
		p("| drain | format | events/s (runs) | mean | / native | relay / pg_recvlogical | pg_recvlogical events/s (mean) | relay CPU per event |\n")
		p("|---|---|---|---:|---:|---:|---:|---:|\n")
		for _, delivery := range deliveries {
			native := variant{Delivery: delivery}
			for _, mode := range uniqueModes(r.Drains) {
				n := meanOf(r.drainRates(mode, native))
				for _, f := range r.formats() {
					v := newVariant(delivery, f)
					ds := r.drains(mode, v)
					if len(ds) == 0 {
						continue
					}
					var rates, ratios, ceil, cpu []float64
					for _, d := range ds {
						rates = append(rates, d.RelayRate())
						if d.CeilingSec > 0 {
							ratios = append(ratios, d.Ratio())
							ceil = append(ceil, d.CeilingRate())
						}
						if d.RelayCPU > 0 {
							cpu = append(cpu, d.RelayCPU/float64(d.Events)*1e6)
						}
					}
					vs := "–"
					if v.registry() && n > 0 {
						vs = fmt.Sprintf("**%.0f %%**", 100*meanOf(rates)/n)
					}
					p("| %s | %s | %s | %s | %s | %s | %s | %s µs |\n", label(fmt.Sprintf("%d-event tx", mode), delivery), f, joinRates(rates), benchkit.Num(meanOf(rates)),
						vs, benchkit.F2(meanOf(ratios)), benchkit.Num(meanOf(ceil)), benchkit.F1(meanOf(cpu)))
				}
			}
		}
		p("\n")
	}
	if len(r.Latency) > 0 {
		p("| offered events/s | events/tx | format | visible p50 / p99 (runs) | mean p99 | p99 − native | relay CPU per event |\n")
		p("|---:|---:|---|---|---:|---:|---:|\n")
		for _, delivery := range deliveries {
			native := variant{Delivery: delivery}
			for _, tx := range uniqueTx(r.Latency) {
				for _, rate := range uniqueRates(r.Latency) {
					n, _ := r.p99Mean(rate, tx, native)
					for _, f := range r.formats() {
						v := newVariant(delivery, f)
						ls := r.latencies(rate, tx, v)
						if len(ls) == 0 {
							continue
						}
						var each, cpu []float64
						var runs []string
						for _, l := range ls {
							each = append(each, l.ConsP99)
							runs = append(runs, fmt.Sprintf("%s / %s", benchkit.F1(l.ConsP50), benchkit.F1(l.ConsP99)))
							if l.RelayCPUPer100k > 0 {
								cpu = append(cpu, l.RelayCPUPer100k*10) // s per 100k → µs per event
							}
						}
						diff := "–"
						if v.registry() && n > 0 {
							diff = fmt.Sprintf("**%+.1f ms**", meanOf(each)-n)
						}
						p("| %s | %d | %s | %s ms | %s ms | %s | %s µs |\n", label(benchkit.Num(float64(rate)), delivery), tx, f, strings.Join(runs, "; "),
							benchkit.F1(meanOf(each)), diff, benchkit.F1(meanOf(cpu)))
					}
				}
			}
		}
		p("\n")
	}
	if len(r.Decodes) > 0 {
		var s []string
		for _, d := range r.Decodes {
			res := "every field equal"
			if d.Error != "" {
				res = "FAILED: " + d.Error
			}
			s = append(s, fmt.Sprintf("%s, round %d: %d records, %s", d.Format, d.Round, d.Checked, res))
		}
		p("Read back: the first records of each registry format's latency run, decoded with the schema their frame names "+
			"(fetched by id, package `record` as the inbox decodes) and compared with the row's payload: %s.\n\n", strings.Join(s, "; "))
	}
	return w.String()
}
