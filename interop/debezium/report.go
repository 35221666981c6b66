package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Markers of the generated section of docs/benchmarks.md.
const (
	sectionStart = "<!-- interop:start -->"
	sectionEnd   = "<!-- interop:end -->"
)

func numCPU() int       { return runtime.NumCPU() }
func goVersion() string { return runtime.Version() }

// examplesPerKind bounds the unexplained differences printed per kind
// (all of them go to the log directory's diffs file).
const examplesPerKind = 3

func (r *run) printComparison(c *comparison) {
	r.logf("%s: %d router records, %d relay records, %d outbox rows; %d compared record for record (%d of them tombstones); "+
		"record.Decode reads %d pairs as the same debezium-format event",
		c.Profile, c.Debezium, c.Relay, c.Rows, c.Matched, c.Tombstones, c.InboxDecoded)
	for _, e := range c.explainedKinds() {
		r.logf("  explained: %s: %d records (e.g. %s)", e.Kind, e.Count, e.Example)
		r.logf("    why: %s", why[e.Kind])
	}
	if d := medianDelta(c.TimeDelta); len(c.TimeDelta) > 0 {
		r.logf("  record time: router minus relay (commit time) median %s, max %s", d.Round(time.Millisecond), maxDelta(c.TimeDelta).Round(time.Millisecond))
	}
	if len(c.Unexplained) == 0 {
		r.logf("  no unexplained difference")
		return
	}
	r.logf("  UNEXPLAINED differences: %d", len(c.Unexplained))
	byWhat := map[string][]difference{}
	var whats []string
	for _, d := range c.Unexplained {
		if byWhat[d.What] == nil {
			whats = append(whats, d.What)
		}
		byWhat[d.What] = append(byWhat[d.What], d)
	}
	sort.Strings(whats)
	for _, w := range whats {
		ds := byWhat[w]
		r.logf("    %s: %d records, e.g.", w, len(ds))
		for _, d := range ds[:min(len(ds), examplesPerKind)] {
			r.logf("      event %s: router %s, relay %s", d.EventID, d.Debezium, d.Relay)
		}
	}
}

// writeDiffs writes every unexplained difference of c to the log
// directory.
func (r *run) writeDiffs(c *comparison) error {
	if len(c.Unexplained) == 0 {
		return nil
	}
	var b strings.Builder
	for _, d := range c.Unexplained {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	name := "diffs-" + strings.NewReplacer(" ", "-", "(", "", ")", "", "=", "-", ",", "").Replace(c.Profile) + ".txt"
	path := filepath.Join(r.cfg.logDir, name)
	r.logf("  all differences: %s", path)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func medianDelta(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func maxDelta(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// printConnectOnly shows a few of the router's records (-connect-only).
func (r *run) printConnectOnly(recs []rawRecord) {
	r.logf("connect-only: %d router records; the first ones:", len(recs))
	for i := range min(5, len(recs)) {
		x := recs[i]
		r.logf("  %s/%d key %s value %s headers %s time %s", x.Topic, x.Partition, show(x.Key), show(x.Value), headerList(x.Headers), x.Time.UTC().Format(time.RFC3339Nano))
	}
}

// medianStats is the median of each of a process's numbers over the
// rounds (each number on its own: the median rate and the median CPU may
// come from different rounds).
func medianStats(ds []*drainResult) drainStats {
	var all []drainStats
	for _, d := range ds {
		all = append(all, d.stats())
	}
	med := func(f func(s drainStats) float64) float64 {
		v := make([]float64, len(all))
		for i, s := range all {
			v[i] = f(s)
		}
		sort.Float64s(v)
		if n := len(v); n%2 == 0 {
			return (v[n/2-1] + v[n/2]) / 2
		}
		return v[len(v)/2]
	}
	return drainStats{
		Events:        all[0].Events,
		FirstEvent:    time.Duration(med(func(s drainStats) float64 { return float64(s.FirstEvent) })),
		AllEvents:     time.Duration(med(func(s drainStats) float64 { return float64(s.AllEvents) })),
		RateFromStart: med(func(s drainStats) float64 { return s.RateFromStart }),
		SteadyRate:    med(func(s drainStats) float64 { return s.SteadyRate }),
		CPUTotal:      med(func(s drainStats) float64 { return s.CPUTotal }),
		CPUSteady:     med(func(s drainStats) float64 { return s.CPUSteady }),
		CPUPer100k:    med(func(s drainStats) float64 { return s.CPUPer100k }),
		PeakRSS:       int64(med(func(s drainStats) float64 { return float64(s.PeakRSS) })),
	}
}

// sides splits the rounds into the relay's drains and Connect's.
func sides(rounds [][2]*drainResult) (relay, connect []*drainResult) {
	for _, rd := range rounds {
		relay, connect = append(relay, rd[0]), append(connect, rd[1])
	}
	return relay, connect
}

// drainRows is the drain table, for the terminal and the doc: the
// medians of the rounds.
func drainRows(rounds [][2]*drainResult) [][]string {
	rows := [][]string{{"process", "events", "first event after", "all events after", "events/s from start", "events/s steady", "CPU from start", "CPU per 100k events, steady", "peak RSS"}}
	relay, connect := sides(rounds)
	for _, ds := range [][]*drainResult{relay, connect} {
		s := medianStats(ds)
		rows = append(rows, []string{ds[0].Name, group(s.Events), secs(s.FirstEvent), secs(s.AllEvents),
			group(int64(s.RateFromStart + 0.5)), group(int64(s.SteadyRate + 0.5)),
			fmt.Sprintf("%.2f s", s.CPUTotal), fmt.Sprintf("%.2f s", s.CPUPer100k), mib(s.PeakRSS)})
	}
	return rows
}

// roundsLine lists each round's events/s from start and steady.
func roundsLine(rounds [][2]*drainResult) string {
	var parts []string
	for i, rd := range rounds {
		a, b := rd[0].stats(), rd[1].stats()
		first := "relay first"
		if i%2 == 1 {
			first = "Connect first"
		}
		parts = append(parts, fmt.Sprintf("round %d (%s): relay %s / %s, Debezium %s / %s", i+1, first,
			group(int64(a.RateFromStart+0.5)), group(int64(a.SteadyRate+0.5)), group(int64(b.RateFromStart+0.5)), group(int64(b.SteadyRate+0.5))))
	}
	return "Events/s from start / steady in each round: " + strings.Join(parts, "; ") + "."
}

// ratios compares the relay's medians with Connect's.
func ratios(rounds [][2]*drainResult) string {
	relay, connect := sides(rounds)
	rel, dbz := medianStats(relay), medianStats(connect)
	return fmt.Sprintf("The relay against Debezium (medians): %s the events/s from process start, %s in steady state; "+
		"%s of its CPU from process start and %s per event in steady state; %s of its peak RSS.",
		times(rel.RateFromStart, dbz.RateFromStart), times(rel.SteadyRate, dbz.SteadyRate),
		fraction(rel.CPUTotal, dbz.CPUTotal), fraction(rel.CPUPer100k, dbz.CPUPer100k),
		fraction(float64(rel.PeakRSS), float64(dbz.PeakRSS)))
}

func times(a, b float64) string {
	if b <= 0 {
		return "? ×"
	}
	return fmt.Sprintf("%.1f ×", a/b)
}

// fraction renders a/b as "1/N" (a smaller) or "N ×".
func fraction(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "?"
	}
	if a < b {
		return fmt.Sprintf("1/%.0f", b/a)
	}
	return fmt.Sprintf("%.1f ×", a/b)
}

func (r *run) printDrain() {
	rows := drainRows(r.drains)
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	r.logf("drain of %s events, side by side (each process alone, from its start; medians of %d rounds):", group(r.drains[0][0].Events), len(r.drains))
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := widths[i] - len([]rune(c))
			if i == 0 {
				b.WriteString(c + strings.Repeat(" ", pad))
			} else {
				b.WriteString(strings.Repeat(" ", pad) + c)
			}
		}
		r.logf("  %s", b.String())
	}
	r.logf("  %s", ratios(r.drains))
	r.logf("  %s", roundsLine(r.drains))
}

// section is the Markdown of the interop section, markers included.
func (r *run) section() string {
	var b strings.Builder
	h := r.host
	fmt.Fprintf(&b, "%s\n\n## Beside Debezium: record-for-record interop and the side-by-side drain (issue 20)\n\n", sectionStart)
	fmt.Fprintf(&b, "Run `%s`, %s, %.1f min. %d CPUs (%s), load average %s at the start and %s at the end (other work shares this machine); "+
		"PostgreSQL %s, Kafka %s (single KRaft node), %s on %s, relay %s (%s), commit %s.\n\n",
		r.id, r.t0.UTC().Format("2006-01-02 15:04 UTC"), time.Since(r.t0).Minutes(), h.cpus, h.model, h.loadStart, h.loadEnd,
		h.postgres, r.cfg.kafkaVersion, r.cfg.versions, h.java, h.relay, h.goVersion, h.commit)
	fmt.Fprintf(&b, "Command: `%s` (effective: `-n %d -drain-n %d -drain-rounds %d`). What it does and every difference it explains: [debezium-interop.md](debezium-interop.md).\n\n",
		r.cfg.command, r.cfg.n, r.cfg.drainN, r.cfg.drainRounds)
	b.WriteString("| comparison | router records | relay records | compared field by field | tombstones among them | record.Decode: same event | unexplained differences | explained differences |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, c := range r.compares {
		var ex []string
		for _, e := range c.explainedKinds() {
			ex = append(ex, fmt.Sprintf("%s: %s", e.Kind, group(int64(e.Count))))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %d | %s |\n", c.Profile, group(int64(c.Debezium)), group(int64(c.Relay)), group(int64(c.Matched)),
			group(int64(c.Tombstones)), group(int64(c.InboxDecoded)), len(c.Unexplained), strings.Join(ex, "; "))
	}
	seen := map[string]bool{}
	for _, c := range r.compares {
		for _, e := range c.explainedKinds() {
			if !seen[e.Kind] {
				if len(seen) == 0 {
					b.WriteString("\nExplained differences (the run checks each; [debezium-interop.md](debezium-interop.md#what-differs-and-why)):\n\n")
				}
				seen[e.Kind] = true
				fmt.Fprintf(&b, "- *%s*: %s.\n", e.Kind, why[e.Kind])
			}
		}
	}
	for _, n := range r.notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	fmt.Fprintf(&b, "\nDrain of a backlog of %s events (one per transaction, ~300-byte jsonb payload and a traceparent header), each process alone on the machine, "+
		"measured from its process start; medians of %d rounds:\n\n", group(r.drains[0][0].Events), len(r.drains))
	rows := drainRows(r.drains)
	b.WriteString("| " + strings.Join(rows[0], " | ") + " |\n|---|" + strings.Repeat("---:|", len(rows[0])-1) + "\n")
	for _, row := range rows[1:] {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	fmt.Fprintf(&b, "\n%s %s\n\n", ratios(r.drains), roundsLine(r.drains))
	b.WriteString("How it is measured: the backlog is written once, after two slots per round were created, so every " +
		"slot holds the same rows. In each round the relay (`outbox-relay run --record-format debezium`, default flags " +
		"otherwise) drains one slot and Kafka Connect standalone another, each alone on the machine, the order alternating " +
		"from round to round; Connect runs one PostgreSQL connector with the Outbox Event Router configured as in " +
		"[formats.md](formats.md#the-router-configuration-that-matches) (`snapshot.mode=no_data`, Connect's default " +
		"producer settings) in a JVM with the options of Kafka's `connect-standalone.sh` (`-Xms256M -Xmx2G`, G1). " +
		"Every " + fmt.Sprintf("%d ms", r.cfg.interval.Milliseconds()) + " the run reads the end offsets of the process's topics, its " +
		"`/proc/<pid>/stat` (user + system CPU of all its threads) and its `/proc/<pid>/status` (VmHWM). " +
		"*first event after*, *all events after*: since the process was started. *events/s from start*: events / " +
		"*all events after*. *steady*: between the samples at 10 % and 90 % of the backlog, start-up and tail left out; " +
		"*CPU per 100k events, steady*: the CPU in that window per 100,000 events. *CPU from start*: from the process's " +
		"start to its last event. *peak RSS*: VmHWM then. Each number is the median over the rounds on its own. The " +
		"first round's records of both sides are compared afterwards (*drain backlog* above).\n\n")
	b.WriteString(sectionEnd)
	return b.String()
}

// updateReport replaces the interop section of path (appending it when
// the file has none).
func updateReport(path, section string) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := spliceSection(string(old), section)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// spliceSection puts section (markers included) in place of doc's
// interop section, or appends it after a blank line.
func spliceSection(doc, section string) string {
	i, j := strings.Index(doc, sectionStart), strings.Index(doc, sectionEnd)
	if i >= 0 && j > i {
		return doc[:i] + section + doc[j+len(sectionEnd):]
	}
	if doc == "" {
		return "# Benchmarks\n\n" + section + "\n"
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + section + "\n"
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mib(b int64) string {
	m := float64(b) / (1 << 20)
	return group(int64(m)) + fmt.Sprintf(".%d MiB", int64(m*10)%10)
}
