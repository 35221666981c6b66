package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// spliceReport replaces the generated section of path
// (benchkit.OutboxSection) with md, keeping the hand-written text around
// it; a file without markers gets them appended. inbox-bench's section
// (benchkit.InboxSection) is kept too: outside the generated section it
// is left where it is, and if it ended up inside (an edit by hand) it is
// moved to just after the END marker instead of being lost.
func spliceReport(path, md string, res *results) error {
	if res.PNGPath != "" {
		rel, err := filepath.Rel(filepath.Dir(path), res.PNGPath)
		if err != nil {
			rel = res.PNGPath
		}
		md += fmt.Sprintf("\n![relay vs ceilings, latency distribution, memory](%s)\n", filepath.ToSlash(rel))
	}
	sec := benchkit.OutboxSection
	return benchkit.UpdateFile(path, func(doc string) (string, error) {
		section := sec.Wrap(md)
		if inbox := benchkit.InboxSection.In(sec.In(doc)); inbox != "" {
			section += "\n\n" + inbox
		}
		return sec.Replace(doc, section), nil
	})
}

func pct(part, whole float64) string {
	if whole <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f %%", 100*part/whole)
}

func renderMarkdown(r *results, cfg *config) string {
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("## Results of run `%s` (%s UTC, %.1f min)\n\n", r.RunID, r.Started.UTC().Format("2006-01-02 15:04"), r.Finished.Sub(r.Started).Minutes())
	p("%s. Arguments: `%s`.\n\n", r.Host.Describe(), r.Config)

	p("### Targets\n\n```\n")
	checks := r.checks()
	for _, c := range checks {
		p("%s\n", c)
	}
	if len(checks) == 0 {
		p("(no target measured)\n")
	}
	p("```\n\n")
	if len(r.Errors) > 0 {
		p("**Phases that failed** (a concurrent chaos test stopping Kafka or restarting PostgreSQL does this; rerun):\n\n")
		for _, e := range r.Errors {
			p("- %s\n", e)
		}
		p("\n")
	}

	p("%s", renderDeliveries(r))
	p("%s", renderFormats(r))
	if len(r.Drains) > 0 {
		p("### 1. Drain: the relay against pg_recvlogical on the same WAL\n\n")
		p("| events / tx | events | WAL | payload | pg_recvlogical | relay | relay / ceiling | walsender busy (ceiling / relay) | relay CPU | relay cores | relay peak RSS |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, d := range r.Drains {
			if !d.complete() {
				p("| %s | %s | %s MiB | | %s | – | – | | | | |\n", d.modeLabel(), benchkit.Num(float64(d.Events)), benchkit.F1(benchkit.MiB(d.WALBytes)), secRate(d.CeilingSec, d.CeilingRate()))
				continue
			}
			p("| %s | %s | %s MiB | %s B | %s | %s | **%s** | %s / %s | %s s (%s s per 100k) | %s | %s MiB |\n",
				d.modeLabel(), benchkit.Num(float64(d.Events)), benchkit.F1(benchkit.MiB(d.WALBytes)), benchkit.Num(d.PayloadBytes),
				secRate(d.CeilingSec, d.CeilingRate()), secRate(d.RelaySec, d.RelayRate()), benchkit.F2(d.Ratio()),
				pct(d.CeilingWalsenderCPU, d.CeilingSec), pct(d.RelayWalsenderCPU, d.RelaySec),
				benchkit.F2(d.RelayCPU), benchkit.F2(d.RelayCPU/float64(d.Events)*1e5), benchkit.F2(d.RelayCPU/d.RelaySec), benchkit.F1(benchkit.MiB(d.PeakRSS)))
		}
		p("\nBoth readers start from slots created at the same WAL position and stop at the same end LSN, one after the other. "+
			"pg_recvlogical: process start to exit at `--endpos`. Relay: process start (start-up, about %s s, included) until the slot's "+
			"`confirmed_flush_lsn` ≥ the end LSN, polled every 25 ms; the relay confirms at most every 100 ms while acknowledgements advance. "+
			"\"walsender busy\" is the walsender's CPU time (pgoutput decoding, server side) over the reader's wall time; "+
			"\"relay cores\" is the relay's CPU time over its wall time.\n\n", benchkit.F2(avgStartup(r.Drains)))
		for _, d := range r.Drains {
			for _, n := range d.Notes {
				p("- %s-event transactions: %s\n", d.modeLabel(), n)
			}
		}
	}

	if k := r.Kafka; k != nil && k.Max != nil {
		p("### 2. Kafka ceiling: ProducerPerformance on the same broker\n\n")
		p("300-byte records, `acks=all linger.ms=2 batch.size=%d compression.type=none`, a 6-partition topic.\n\n", cfg.KafkaBatch)
		p("| offered | records | records/s | MB/s | avg | p50 | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, pr := range []*perfResult{k.Max, k.Fixed} {
			if pr == nil {
				continue
			}
			offered := "as fast as possible"
			if pr.Target > 0 {
				offered = benchkit.Num(float64(pr.Target)) + " records/s"
			}
			p("| %s | %s | **%s** | %s | %s ms | %s ms | %s ms | %s ms | %s ms |\n", offered, benchkit.Num(float64(pr.Records)), benchkit.Num(pr.RecPerSec), benchkit.F1(pr.MBPerSec),
				benchkit.F1(pr.AvgMs), benchkit.Num(pr.P50Ms), benchkit.Num(pr.P99Ms), benchkit.Num(pr.P999Ms), benchkit.Num(pr.MaxMs))
		}
		if len(r.Drains) > 0 {
			p("\nFor comparison, the relay's drain rate above is %s of this producer ceiling.\n", relayShareOfKafka(r))
		}
		p("\n")
	}

	if len(r.Latency) > 0 {
		p("### 3. Latency at fixed offered rates (relay caught up)\n\n")
		p("| offered events/s | events/tx | achieved | writer conns | insert+commit p50 / p99 | samples | receipt p50 | receipt p99 | receipt p99.9 | receipt max | ack p50 ≈ | ack p99 ≈ | ack p99.9 ≈ | acks ≤ 25 ms | decode p50 / p99 ≈ | CPU per 100k: relay / broker / walsender |\n")
		p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, l := range r.Latency {
			ach := benchkit.Num(l.Achieved)
			if !l.Held {
				ach += " (writer could not keep up)"
			}
			p("| %s | %d | %s | %d | %s / %s ms | %s | %s ms | %s ms | %s ms | %s ms | %s ms | %s ms | %s ms | %s | %s / %s ms | %s / %s / %s s |\n",
				benchkit.Num(float64(l.Target)), l.TxSize, ach, l.Workers, benchkit.F1(l.InsertP50), benchkit.F1(l.InsertP99), benchkit.Num(float64(l.Samples)),
				benchkit.F1(l.ConsP50), benchkit.F1(l.ConsP99), benchkit.F1(l.ConsP999), benchkit.F1(l.ConsMax),
				benchkit.F1(l.HistP50), benchkit.F1(l.HistP99), benchkit.F1(l.HistP999), pctf(l.HistUnder25), benchkit.F1(l.DecodeP50), benchkit.F1(l.DecodeP99), benchkit.F2(l.RelayCPUPer100k), benchkit.F2(l.BrokerCPUPer100k), benchkit.F2(l.WalsenderCPUPer100k))
		}
		p("\n*insert+commit*: the writer's round trip for one autocommitted INSERT of *events/tx* rows (synchronous_commit on, so it includes the WAL flush). " +
			"*receipt*: commit time to receipt by a read_committed consumer (`internal/kafkafetch`, one reader per partition; an exactly-once relay's records become visible at their transaction's commit), exact percentiles over every record " +
			"committed in the window. The commit time is the record timestamp, which Kafka keeps in whole milliseconds, so these values " +
			"are over-stated by up to 1 ms. *ack ≈*: the relay's `outbox_relay_commit_to_ack_seconds` histogram, bucket counts before and after the window, " +
			"**percentiles interpolated linearly inside a bucket**; its bounds are 1, 2.5, 5, 7.5, 10, 15, 20, 25, 30, 40, 50, 75, 100, 250 ms …, so a " +
			"percentile is only known to lie in its bucket. *acks ≤ 25 ms* is exact (25 ms is a bucket bound). *decode ≈*: the relay's " +
			"`outbox_relay_commit_to_decode_seconds` histogram (commit to the relay decoding the commit record), interpolated the same way: " +
			"the part of the latency spent before the relay has the event (PostgreSQL's WAL sender, the network, the relay's reader).\n\n")
		for _, l := range r.Latency {
			if l.Samples > 0 && int64(l.Samples) != l.Committed {
				p("- %s: %s events committed, %s records received in the window\n", l.label(), benchkit.Num(float64(l.Committed)), benchkit.Num(float64(l.Samples)))
			}
			for _, n := range l.Notes {
				p("- %s: %s\n", l.label(), n)
			}
		}
		for _, l := range r.Latency {
			if l.Samples > 0 {
				p("\nHistogram buckets, %s: %s", l.label(), bucketLine(l.Buckets))
			}
		}
		if len(r.LatencyCeiling) > 0 {
			p("\n\n**Replication ceiling** at the same rates: `pg_recvlogical` alone (test_decoding, include-timestamp, its own slot, " +
				"no relay reading, Kafka idle), the same writer; commit time (µs, from the WAL) to the moment it printed the COMMIT line. " +
				"This is the part of the latency PostgreSQL and the machine impose on any logical-replication reader.\n\n")
			p("| offered events/s | events/tx | achieved | samples (commits) | receipt p50 | receipt p99 | receipt p99.9 | receipt max | relay ack p99 ≈ / ceiling p99 |\n")
			p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
			for _, c := range r.LatencyCeiling {
				ratio := "–"
				for _, l := range r.Latency {
					if l.Target == c.Target && l.TxSize == c.TxSize && c.P99 > 0 && l.HistCount > 0 {
						ratio = fmt.Sprintf("%.1f ×", l.HistP99/c.P99)
					}
				}
				p("| %s | %d | %s | %s | %s ms | %s ms | %s ms | %s ms | %s |\n", benchkit.Num(float64(c.Target)), c.TxSize, benchkit.Num(c.Achieved), benchkit.Num(float64(c.Samples)),
					benchkit.F1(c.P50), benchkit.F1(c.P99), benchkit.F1(c.P999), benchkit.F1(c.Max), ratio)
			}
		}
		p("\n\n")
	}

	if len(r.Drains) > 0 || r.BigTx != nil {
		p("### 4. Memory and CPU of the relay\n\n")
		p("| phase | events | relay time | peak RSS (VmHWM) | relay CPU | CPU per 100k events |\n|---|---:|---:|---:|---:|---:|\n")
		for _, d := range r.Drains {
			if d.complete() {
				p("| drain, %s-event transactions | %s | %s s | %s MiB | %s s | %s s |\n", d.modeLabel(), benchkit.Num(float64(d.Events)), benchkit.F2(d.RelaySec),
					benchkit.F1(benchkit.MiB(d.PeakRSS)), benchkit.F2(d.RelayCPU), benchkit.F2(d.RelayCPU/float64(d.Events)*1e5))
			}
		}
		if bt := r.BigTx; bt != nil && bt.PeakRSS > 0 {
			p("| one %s-row transaction | %s | %s s after commit | %s MiB (%s MiB before) | %s s | %s s |\n",
				benchkit.Num(float64(bt.Rows)), benchkit.Num(bt.Published), benchkit.F2(bt.DrainSec), benchkit.F1(benchkit.MiB(bt.PeakRSS)), benchkit.F1(benchkit.MiB(bt.BaselineRSS)),
				benchkit.F2(bt.RelayCPU), benchkit.F2(bt.RelayCPU/math.Max(bt.Published, 1)*1e5))
		}
		if bt := r.BigTx; bt != nil && bt.PeakRSS > 0 {
			p("\nThe large transaction: `INSERT … SELECT generate_series(1, %d)` took %s s (%s MiB of WAL); PostgreSQL sends it only after the commit "+
				"(protocol version 1, no streaming of in-progress transactions), spilling to disk past `logical_decoding_work_mem`; "+
				"the walsender used %s s of CPU and the relay acknowledged the last event %s s after the commit (%s events/s). "+
				"Peak RSS is that of a fresh relay process started for this phase.\n",
				bt.Rows, benchkit.F1(bt.InsertSec), benchkit.F1(benchkit.MiB(bt.WALBytes)), benchkit.F2(bt.WalsenderCPU), benchkit.F2(bt.DrainSec), benchkit.Num(rate(int(bt.Published), bt.DrainSec)))
			for _, n := range bt.Notes {
				p("- %s\n", n)
			}
		}
		p("\nCPU is utime + stime from `/proc/<pid>/stat` (CLK_TCK 100), for the relay process since its start.\n\n")
	}
	if len(r.Notes) > 0 {
		p("### Notes\n\n")
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	return w.String()
}

func secRate(sec, rate float64) string {
	if sec <= 0 {
		return "–"
	}
	return fmt.Sprintf("%s s, %s/s", benchkit.F2(sec), benchkit.Num(rate))
}

func pctf(f float64) string {
	if f <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f %%", 100*f)
}

func avgStartup(ds []drainResult) float64 {
	t, n := 0.0, 0
	for _, d := range ds {
		if d.RelayStartupSec > 0 {
			t += d.RelayStartupSec
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return t / float64(n)
}

func relayShareOfKafka(r *results) string {
	var parts []string
	for _, d := range r.Drains {
		if d.complete() && r.Kafka.Max.RecPerSec > 0 {
			parts = append(parts, fmt.Sprintf("%.0f %% (%d-event transactions)", 100*d.RelayRate()/r.Kafka.Max.RecPerSec, d.Mode))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

func bucketLine(b []bucket) string {
	var parts []string
	prev := 0.0
	for _, bk := range b {
		n := bk.Count - prev
		prev = bk.Count
		if n == 0 {
			continue
		}
		le := "+Inf"
		if !math.IsInf(bk.LE, 1) {
			le = fmt.Sprintf("%g ms", ms(bk.LE))
		}
		parts = append(parts, fmt.Sprintf("≤ %s: %s", le, benchkit.Num(n)))
	}
	return strings.Join(parts, ", ")
}
