package main

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// targetRate is issue 18's target for one batched consumer instance with
// a one-INSERT handler on the 2-core machine.
const targetRate = 20000

// spliceSection replaces this program's section of path
// (benchkit.InboxSection; outbox-bench keeps it when it rewrites its own)
// with md; a file without the markers gets the section appended, a
// missing file is created, a file with only one of them is an error.
func spliceSection(path, md string) error {
	sec := benchkit.InboxSection
	return benchkit.UpdateFile(path, func(doc string) (string, error) {
		if sec.In(doc) == "" && (strings.Contains(doc, sec.Start) || strings.Contains(doc, sec.End)) {
			return "", fmt.Errorf("%s has only one of the markers %s and %s: fix it by hand", path, sec.Start, sec.End)
		}
		return sec.Replace(doc, sec.Wrap(md)), nil
	})
}

// age formats a duration in seconds: milliseconds below a second.
func age(sec float64) string {
	switch {
	case math.IsNaN(sec) || math.IsInf(sec, 0) || sec < 0:
		return "–"
	case sec < 0.01:
		return fmt.Sprintf("%.1f ms", sec*1000)
	case sec < 1:
		return fmt.Sprintf("%.0f ms", sec*1000)
	}
	return fmt.Sprintf("%.2f s", sec)
}

// row is one table row, formatted.
type row struct {
	Mode, Effect, Path, Events, Rate, Ratio, P50, P99, CPU, CPU100k, RSS, Batch, Produce, Check string
}

func (res *results) rows() []row {
	base := map[int]float64{}
	for _, r := range res.Modes {
		if !r.MemCheck && r.Mode == modeByNumber(r.Mode).Baseline {
			base[r.Mode] = r.Rate()
		}
	}
	var out []row
	for _, r := range res.Modes {
		m := modeByNumber(r.Mode)
		x := row{Mode: r.label(), Effect: m.Case(), Path: m.Path(), Events: benchkit.Num(float64(r.Events)), Check: r.Check}
		if r.Err != "" && r.Check == "ok" {
			x.Check = r.Err
		}
		if r.Rate() <= 0 {
			x.Rate, x.Ratio, x.P50, x.P99, x.CPU, x.CPU100k, x.RSS, x.Batch, x.Produce = "–", "–", "–", "–", "–", "–", "–", "–", "–"
			if r.Check == "" || r.Check == "–" {
				x.Check = "failed: " + r.Err
			}
			out = append(out, x)
			continue
		}
		x.Rate = benchkit.Num(r.Rate())
		x.Ratio = "–"
		if b := base[m.Baseline]; b > 0 {
			x.Ratio = fmt.Sprintf("%.1f ×", r.Rate()/b)
		}
		x.P50, x.P99 = age(r.AgeP50), age(r.AgeP99)
		x.CPU = benchkit.F2(r.CPU) + " s"
		x.CPU100k = benchkit.F2(r.CPU/float64(r.Events)*1e5) + " s"
		x.RSS = benchkit.F1(benchkit.MiB(r.PeakRSS)) + " MiB"
		x.Batch = "–"
		if r.Batches > 0 {
			x.Batch = benchkit.F1(float64(r.Applied) / float64(r.Batches))
		}
		x.Produce = benchkit.F2(r.ProduceSec) + " s"
		out = append(out, x)
	}
	return out
}

// targetLines are the PASS/FAIL lines of the batched one-INSERT modes.
func (res *results) targetLines() []string {
	var out []string
	for _, r := range res.Modes {
		m := modeByNumber(r.Mode)
		if r.MemCheck || m.Projection || !m.Batched {
			continue
		}
		verdict := "FAIL"
		if r.Rate() >= targetRate {
			verdict = "PASS"
		}
		out = append(out, fmt.Sprintf("%s one instance, one-INSERT effect, %s (mode %d) ≥ %s events/s: %s events/s",
			verdict, m.Path(), r.Mode, benchkit.Num(targetRate), benchkit.Num(r.Rate())))
	}
	return out
}

// memoryNote compares mode 2's peak RSS on N and on N/4: batches are
// bounded by BatchSize × partitions, so a backlog four times longer must
// not need more memory. Differences below 8 MiB or a quarter are noise
// (the Go heap grows in steps, the kafka-go fetch buffers vary).
func (res *results) memoryNote() string {
	var full, quarter *modeResult
	for i := range res.Modes {
		r := &res.Modes[i]
		if r.Mode != 2 || r.Rate() <= 0 {
			continue
		}
		if r.MemCheck {
			quarter = r
		} else {
			full = r
		}
	}
	if full == nil || quarter == nil {
		return ""
	}
	diff := full.PeakRSS - quarter.PeakRSS
	verdict := "does not grow with N"
	if float64(diff) > math.Max(8<<20, 0.25*float64(quarter.PeakRSS)) {
		verdict = "GROWS with N"
	}
	return fmt.Sprintf("Memory bound: mode 2's peak RSS is %s MiB for %s events and %s MiB for %s: it %s (difference %+.1f MiB; "+
		"batches are bounded by BatchSize × partitions, not by the backlog).",
		benchkit.F1(benchkit.MiB(full.PeakRSS)), benchkit.Num(float64(full.Events)), benchkit.F1(benchkit.MiB(quarter.PeakRSS)), benchkit.Num(float64(quarter.Events)), verdict, benchkit.MiB(diff))
}

// renderTable is the plain-text summary printed to stdout.
func renderTable(res *results) string {
	var w strings.Builder
	fmt.Fprintf(&w, "inbox-bench run %s, %d CPUs, PostgreSQL %s, Kafka %s: %s\n\n", res.RunID, res.Host.CPUs, res.Host.PGVersion, res.Host.KafkaVersion, res.Config)
	tw := tabwriter.NewWriter(&w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\teffect\tpath\tevents\tevents/s\tratio\tage p50\tage p99\tCPU\tCPU/100k\tpeak RSS\tavg batch\tproduce\tcheck\t")
	for _, x := range res.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			x.Mode, x.Effect, x.Path, x.Events, x.Rate, x.Ratio, x.P50, x.P99, x.CPU, x.CPU100k, x.RSS, x.Batch, x.Produce, x.Check)
	}
	tw.Flush()
	w.WriteString("\n")
	for _, l := range res.targetLines() {
		w.WriteString(l + "\n")
	}
	if n := res.memoryNote(); n != "" {
		w.WriteString(n + "\n")
	}
	for _, e := range res.Errors {
		w.WriteString("error: " + e + "\n")
	}
	return w.String()
}

// renderMarkdown is the docs/benchmarks.md section.
func renderMarkdown(res *results) string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("## The inbox consumer: batched transactions (issue 18)\n\n")
	p("Run `%s`, %s UTC, %.1f min. %s.\n\n",
		res.RunID, res.Started.UTC().Format("2006-01-02 15:04"), res.Finished.Sub(res.Started).Minutes(), res.Host.Describe())
	p("Command: `%s` (effective: `%s`).\n\n", res.Command, res.Config)
	if t := res.targetLines(); len(t) > 0 {
		p("```\n%s\n```\n\n", strings.Join(t, "\n"))
	}
	p("| mode | effect | consumer path | events | events/s | vs. one at a time | age at apply p50 | p99 | consumer CPU | CPU per 100k events | peak RSS | events per transaction | produce | check |\n")
	p("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, x := range res.rows() {
		p("| %s | %s | %s | %s | **%s** | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			x.Mode, x.Effect, x.Path, x.Events, x.Rate, x.Ratio, x.P50, x.P99, x.CPU, x.CPU100k, x.RSS, x.Batch, x.Produce, x.Check)
	}
	p("\n")
	if n := res.memoryNote(); n != "" {
		p("%s\n\n", n)
	}
	if len(res.Errors) > 0 {
		p("**Failed:**\n\n")
		for _, e := range res.Errors {
			p("- %s\n", e)
		}
		p("\n")
	}
	p("How it is measured: one `inbox.Consumer` in a child process (pool of %d connections) per mode, each mode with a fresh "+
		"6-partition topic, schema and consumer group. The bench waits until the group has assigned all partitions to the consumer, "+
		"then produces the records with kafka-go (Murmur2Balancer, acks=all, %s) from the parent process, which shares the machine "+
		"with the consumer, PostgreSQL and Kafka. The records are the relay's (key = aggregate_id; headers event_id, event_type, "+
		"schema_version, aggregate_type, aggregate_version); event i belongs to aggregate i mod 10,000 at version i/10,000 + 1. "+
		"*events/s*: events over the time from the first record handed to the producer to the consumer's last applied event "+
		"(`Stats().Applied`, polled every 5 ms). *age at apply*: when the handler's statement returned (just before the commit) "+
		"minus the record timestamp, over every event, in 1 %% buckets; with the producer faster than the consumer it is mostly "+
		"the backlog's wait. *CPU*: utime + stime of the consumer process (`/proc/<pid>/stat`) from its start to the last applied "+
		"event, start-up and group join included; *peak RSS*: its VmHWM. *events per transaction*: `Stats().Applied / Stats().Batches`. "+
		"*produce*: the producer's time for all records; a consumer as fast as it is bound by it. "+
		"*check*: processed_events holds every event once, and the effect table every row (inserts) or every aggregate at its last version "+
		"(projection, version sum = events).\n\n", res.Conns, producerRate(res.Rate))
	p("Modes 1-3 write one row per event (`INSERT INTO effects …` in the Handler; mode 3: one `INSERT … SELECT FROM unnest(…)` per batch). " +
		"Modes 4-6 are the seed's projection: version 1 inserts the aggregate's row, every later version runs " +
		"`UPDATE … SET version = $v WHERE id = $id AND version = $v - 1` checked with `inbox.ExpectRows`; mode 6's BatchHandler groups the " +
		"batch per aggregate and applies each contiguous run of versions with one row of an `UPDATE … FROM unnest(…)` guarded by the first " +
		"version - 1 (and one `INSERT … SELECT FROM unnest(…)` for runs starting at version 1), checking that the rows changed equal the " +
		"aggregates; an aggregate whose versions in the batch are not contiguous falls back to the per-event statements " +
		"(bench/cmd/inbox-bench/handlers.go).\n")
	return w.String()
}

func producerRate(rate int) string {
	if rate <= 0 {
		return "as fast as it can"
	}
	return "paced at " + benchkit.Num(float64(rate)) + " records/s"
}
