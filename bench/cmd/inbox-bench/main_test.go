package main

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
	"github.com/outbox-relay/outbox-relay/record"
)

func TestParseFlags(t *testing.T) {
	base := []string{"-database-url", "postgres://x", "-kafka-brokers", "a:1, b:2", "-log-dir", t.TempDir()}
	cfg, err := parseFlags(base, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.N != 100000 || len(cfg.Modes) != 6 || !cfg.MemCheck || cfg.Conns != 8 || len(cfg.Brokers) != 2 || cfg.Brokers[1] != "b:2" {
		t.Fatalf("defaults: %+v", cfg)
	}
	if !strings.HasPrefix(cfg.Command, "inbox-bench -database-url postgres://x -kafka-brokers 'a:1, b:2'") {
		t.Fatalf("command %q", cfg.Command)
	}
	if cfg, err = parseFlags(append(base, "-quick"), io.Discard); err != nil || cfg.N != 20000 {
		t.Fatalf("-quick: N = %d, %v", cfg.N, err)
	}
	if cfg, err = parseFlags(append(base, "-quick", "-n", "5000", "-modes", "2, 6,2", "-command", "make bench-inbox"), io.Discard); err != nil ||
		cfg.N != 5000 || benchkit.JoinInts(cfg.Modes) != "2,6" || cfg.Command != "make bench-inbox" {
		t.Fatalf("-quick -n 5000: %+v, %v", cfg, err)
	}
	for _, bad := range [][]string{{"-modes", "7"}, {"-modes", ""}, {"-n", "2"}, {"-conns", "0"}, {"extra"}} {
		if _, err := parseFlags(append(append([]string{}, base...), bad...), io.Discard); err == nil {
			t.Fatalf("%v accepted", bad)
		}
	}
	if _, err := parseFlags([]string{"-database-url", "", "-kafka-brokers", ""}, io.Discard); err == nil {
		t.Fatal("no database or brokers accepted")
	}
}

func TestParseKafkaVersion(t *testing.T) {
	if v := parseKafkaVersion("PG_VERSION=15\nKAFKA_VERSION=4.1.1 # pinned\n"); v != "4.1.1" {
		t.Fatalf("kafka version %q", v)
	}
	if v := parseKafkaVersion("nothing\n"); v != "?" {
		t.Fatalf("kafka version %q", v)
	}
}

func TestAgeHist(t *testing.T) {
	var h ageHist
	if !math.IsNaN(h.quantile(0.5)) {
		t.Fatal("empty histogram has a median")
	}
	// 1 ms … 1000 ms, one sample each.
	for i := 1; i <= 1000; i++ {
		h.observe(float64(i) / 1000)
	}
	h.observe(-0.002) // clock skew: counted in the lowest bucket
	if h.count() != 1001 || h.maxSeen() != 1 {
		t.Fatalf("count %d max %v", h.count(), h.maxSeen())
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 0.500}, {0.99, 0.991}, {1, 1}} {
		got := h.quantile(c.q)
		if got < c.want*0.999 || got > c.want*1.011 {
			t.Fatalf("q%v = %v, want %v within 1 %%", c.q, got, c.want)
		}
	}
	if bucketOf(1e9) != histBuckets-1 || !math.IsInf(upperBound(histBuckets-1), 1) || bucketOf(math.NaN()) != 0 {
		t.Fatal("out-of-range buckets")
	}
	if b := bucketOf(histLow); b != 1 || upperBound(0) != histLow {
		t.Fatalf("bucket of the low bound %d", b)
	}
}

// TestRecordDecodes: the bench's records are what the relay publishes, as
// far as the inbox can tell.
func TestRecordDecodes(t *testing.T) {
	ts := time.Unix(1700000000, 0)
	for _, i := range []int{0, 9999, 10000, 123456} {
		ev, err := record.Decode(eventRecord(i, 10000, ts))
		if err != nil {
			t.Fatal(err)
		}
		wantV := int64(i/10000 + 1)
		if ev.ID != eventID(i) || ev.AggregateID != aggregateID(i, 10000) || ev.AggregateVersion != wantV || ev.AggregateType != "order" ||
			ev.SchemaVersion != 1 || !ev.Time.Equal(ts) || len(ev.Headers) != 0 {
			t.Fatalf("event %d decoded as %+v", i, ev)
		}
		if (wantV == 1) != (ev.EventType == "order.created") {
			t.Fatalf("event %d: type %s at version %d", i, ev.EventType, wantV)
		}
		if !strings.Contains(string(ev.Payload), `"order_id":"`+ev.AggregateID+`"`) {
			t.Fatalf("payload %s", ev.Payload)
		}
	}
	if eventID(1) == eventID(2) || aggregateID(3, 10) != aggregateID(13, 10) || aggregateVersion(13, 10) != 2 {
		t.Fatal("ids")
	}
}

func TestPlanProjection(t *testing.T) {
	ev := func(agg string, v int64) *record.Event { return &record.Event{AggregateID: agg, AggregateVersion: v} }
	p := planProjection([]*record.Event{
		ev("a", 1), ev("b", 5), ev("a", 2), ev("c", 3), ev("b", 6), ev("a", 3), // a: 1-3 insert at 3; b: 5-6 update 4→6; c: 3 update 2→3
		ev("d", 2), ev("d", 4), // a gap inside the batch: per event
		ev("e", 7), ev("e", 7), // a repeat: per event
		ev("f", 1), // a new aggregate alone
	})
	if strings.Join(p.InsertIDs, ",") != "a,f" || p.InsertVersions[0] != 3 || p.InsertVersions[1] != 1 {
		t.Fatalf("inserts %v %v", p.InsertIDs, p.InsertVersions)
	}
	if strings.Join(p.UpdateIDs, ",") != "b,c" || p.UpdateFirst[0] != 5 || p.UpdateLast[0] != 6 || p.UpdateFirst[1] != 3 || p.UpdateLast[1] != 3 {
		t.Fatalf("updates %v %v %v", p.UpdateIDs, p.UpdateFirst, p.UpdateLast)
	}
	var single []string
	for _, e := range p.Single {
		single = append(single, e.AggregateID+"@"+string(rune('0'+e.AggregateVersion)))
	}
	if strings.Join(single, ",") != "d@2,d@4,e@7,e@7" {
		t.Fatalf("single %v", single)
	}
	if p := planProjection(nil); len(p.InsertIDs)+len(p.UpdateIDs)+len(p.Single) != 0 {
		t.Fatal("empty batch")
	}
}

func TestSpliceSection(t *testing.T) {
	start, end := benchkit.InboxSection.Start, benchkit.InboxSection.End
	dir := t.TempDir()
	path := filepath.Join(dir, "b.md")
	if err := spliceSection(path, "first\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "# Benchmarks\n\n"+start+"\n\nfirst\n\n"+end+"\n" {
		t.Fatalf("new file:\n%s", got)
	}
	outbox := "<!-- BEGIN outbox-bench generated section -->\nrelay\n<!-- END outbox-bench generated section -->"
	if err := os.WriteFile(path, []byte("# B\n\n"+outbox+"\n\n## Notes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceSection(path, "second"); err != nil {
		t.Fatal(err)
	}
	want := "# B\n\n" + outbox + "\n\n## Notes\n\n" + start + "\n\nsecond\n\n" + end + "\n"
	if got, _ := os.ReadFile(path); string(got) != want {
		t.Fatalf("appended:\n%s", got)
	}
	if err := spliceSection(path, "third"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != strings.Replace(want, "second", "third", 1) {
		t.Fatalf("replaced:\n%s", got)
	}
	if err := os.WriteFile(path, []byte("x\n"+start+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceSection(path, "fourth"); err == nil {
		t.Fatal("a lone marker accepted")
	}
}

func TestRender(t *testing.T) {
	mr := func(mode int, memcheck bool, events int, sec, cpu float64, rss int64, batches int64) modeResult {
		r := modeResult{Mode: mode, MemCheck: memcheck, Events: events, ApplySec: sec, ProduceSec: 1.5, CPU: cpu, PeakRSS: rss, Check: "ok"}
		r.Applied, r.Batches, r.AgeP50, r.AgeP99 = int64(events), batches, 0.0042, 1.5
		return r
	}
	res := &results{
		RunID: "abc", Started: time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC), Finished: time.Date(2026, 12, 4, 15, 6, 0, 0, time.UTC),
		Host:    benchkit.Host{CPUs: 2, CPUModel: "Test CPU", PGVersion: "15.18", KafkaVersion: "4.1.1", GoVersion: "go1.26.8", Commit: "1234567"},
		Command: "make bench-inbox", Config: "-n 100000", N: 100000, Conns: 8,
		Modes: []modeResult{
			mr(1, false, 100000, 100, 40, 30<<20, 100000),
			mr(2, false, 100000, 4, 9, 40<<20, 400),
			mr(2, true, 25000, 1, 2.5, 38<<20, 100),
			mr(3, false, 100000, 2.5, 5, 41<<20, 300),
			mr(4, false, 100000, 125, 45, 30<<20, 100000),
			mr(5, false, 100000, 10, 10, 40<<20, 0),
			{Mode: 6, Events: 100000, Err: "consumer exited", Check: "–"},
		},
	}
	rows := res.rows()
	if rows[1].Rate != "25,000" || rows[1].Ratio != "25.0 ×" || rows[3].Ratio != "40.0 ×" || rows[5].Ratio != "12.5 ×" {
		t.Fatalf("rates and ratios: %+v", rows)
	}
	if rows[1].CPU100k != "9.00 s" || rows[1].RSS != "40.0 MiB" || rows[1].Batch != "250.0" || rows[5].Batch != "–" || rows[1].P50 != "4.2 ms" || rows[1].P99 != "1.50 s" {
		t.Fatalf("row 2: %+v, row 5: %+v", rows[1], rows[5])
	}
	if rows[6].Rate != "–" || !strings.Contains(rows[6].Check, "consumer exited") || rows[2].Mode != "2 (N/4)" {
		t.Fatalf("failed mode: %+v", rows[6])
	}
	lines := res.targetLines()
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "PASS") || !strings.Contains(lines[0], "mode 2") || !strings.HasPrefix(lines[1], "PASS") {
		t.Fatalf("targets %q", lines)
	}
	if n := res.memoryNote(); !strings.Contains(n, "does not grow with N") || !strings.Contains(n, "+2.0 MiB") {
		t.Fatalf("memory note %q", n)
	}
	res.Modes[2].PeakRSS = 20 << 20
	if n := res.memoryNote(); !strings.Contains(n, "GROWS") {
		t.Fatalf("memory note %q", n)
	}
	md := renderMarkdown(res)
	for _, want := range []string{"Command: `make bench-inbox`", "2 CPUs (Test CPU)", "PostgreSQL 15.18, Kafka 4.1.1", "2026-12-04 15:00 UTC",
		"| 3 | one INSERT | BatchHandler, set-based | 100,000 | **40,000** | 40.0 × |", "PASS one instance"} {
		if !strings.Contains(md, want) {
			t.Fatalf("markdown lacks %q:\n%s", want, md)
		}
	}
	if tbl := renderTable(res); !strings.Contains(tbl, "25,000") || !strings.Contains(tbl, "error: ") && len(res.Errors) > 0 {
		t.Fatalf("table:\n%s", tbl)
	}
	if shellJoin([]string{"-n", "5", "-command", "make x", "it's"}) != `-n 5 -command 'make x' 'it'\''s'` {
		t.Fatalf("shellJoin %q", shellJoin([]string{"-n", "5", "-command", "make x", "it's"}))
	}
}
