package main

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

func TestParsePerf(t *testing.T) {
	out := "100 records sent, 20.0 records/sec (0.01 MB/sec), 3.0 ms avg latency, 30.0 ms max latency.\n" +
		"200000 records sent, 105263.2 records/sec (30.12 MB/sec), 180.21 ms avg latency, 350.00 ms max latency, " +
		"170 ms 50th, 300 ms 95th, 340 ms 99th, 349 ms 99.9th.\n"
	r, err := parsePerf(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 200000 || r.RecPerSec != 105263.2 || r.MBPerSec != 30.12 || r.AvgMs != 180.21 || r.MaxMs != 350 ||
		r.P50Ms != 170 || r.P95Ms != 300 || r.P99Ms != 340 || r.P999Ms != 349 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parsePerf("no summary"); err == nil {
		t.Fatal("want an error without a summary line")
	}
}

func TestParseMetricsAndHistogram(t *testing.T) {
	text := `# HELP outbox_relay_events_published_total x
outbox_relay_events_published_total{topic="a"} 10
outbox_relay_events_published_total{topic="b"} 5
outbox_relay_replication_connected 1
h_bucket{le="0.01"} 50
h_bucket{le="0.025"} 90
h_bucket{le="+Inf"} 100
h_count 100
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.sum("outbox_relay_events_published_total"); got != 15 {
		t.Fatalf("sum = %v", got)
	}
	if m.value("outbox_relay_replication_connected") != 1 {
		t.Fatal("gauge not parsed")
	}
	b := m.histogram("h")
	if len(b) != 3 || b[0].LE != 0.01 || !math.IsInf(b[2].LE, 1) {
		t.Fatalf("buckets %+v", b)
	}
	if v, lo, hi := histQuantile(b, 0.25); v != 0.005 || lo != 0 || hi != 0.01 {
		t.Fatalf("p25 = %v in [%v, %v]", v, lo, hi)
	}
	if v, _, _ := histQuantile(b, 0.7); math.Abs(v-0.0175) > 1e-12 {
		t.Fatalf("p70 = %v", v)
	}
	if v, lo, hi := histQuantile(b, 0.99); v != 0.025 || lo != 0.025 || !math.IsInf(hi, 1) {
		t.Fatalf("p99 in +Inf bucket = %v [%v, %v]", v, lo, hi)
	}
	d := diffBuckets(b, []bucket{{0.01, 10}, {0.025, 10}, {math.Inf(1), 10}})
	if d[0].Count != 40 || d[2].Count != 90 {
		t.Fatalf("diff %+v", d)
	}
}

func TestPercentileAndRunID(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if percentile(s, 0.5) != 5 || percentile(s, 0.99) != 10 || percentile(s, 0.1) != 1 {
		t.Fatal("nearest-rank percentile")
	}
	ts, ok := runIDTime(prefixBase + "tpfh34_m1_ceiling")
	if !ok || ts.Year() < 2025 {
		t.Fatalf("run id time %v %v", ts, ok)
	}
	if _, ok := runIDTime("outbox_bench_zz"); ok {
		t.Fatal("a short id is not a run id")
	}
}

func TestSpliceReport(t *testing.T) {
	begin, end := benchkit.OutboxSection.Start, benchkit.OutboxSection.End
	path := filepath.Join(t.TempDir(), "b.md")
	head := "# Title\n\nhand-written\n\n"
	if err := os.WriteFile(path, []byte(head+begin+"\nold\n"+end+"\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := spliceReport(path, "new results\n", &results{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	s := string(got)
	if !strings.HasPrefix(s, head) || !strings.Contains(s, "new results") || strings.Contains(s, "old") || !strings.HasSuffix(s, "tail\n") {
		t.Fatalf("spliced:\n%s", s)
	}
}

// TestSpliceReportKeepsInboxSection: inbox-bench's section survives a
// rewrite, where it stands when it is outside the generated section, moved
// after it when it is inside.
func TestSpliceReportKeepsInboxSection(t *testing.T) {
	begin, end := benchkit.OutboxSection.Start, benchkit.OutboxSection.End
	inbox := benchkit.InboxSection.Start + "\n\n## The inbox consumer\n\n| mode | events/s |\n" + benchkit.InboxSection.End
	for _, tc := range []struct {
		name, file, want string
	}{
		{
			name: "after the generated section",
			file: "# T\n\n" + begin + "\nold\n" + end + "\n\n" + inbox + "\n\ntail\n",
			want: "# T\n\n" + begin + "\n\nnew results\n\n" + end + "\n\n" + inbox + "\n\ntail\n",
		},
		{
			name: "before the generated section",
			file: "# T\n\n" + inbox + "\n\n" + begin + "\nold\n" + end + "\n",
			want: "# T\n\n" + inbox + "\n\n" + begin + "\n\nnew results\n\n" + end + "\n",
		},
		{
			name: "inside the generated section",
			file: "# T\n\n" + begin + "\nold\n" + inbox + "\nolder\n" + end + "\ntail\n",
			want: "# T\n\n" + begin + "\n\nnew results\n\n" + end + "\n\n" + inbox + "\ntail\n",
		},
		{
			name: "no generated section yet",
			file: "# T\n\n" + inbox + "\n",
			want: "# T\n\n" + inbox + "\n\n" + begin + "\n\nnew results\n\n" + end + "\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "b.md")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := spliceReport(path, "new results\n", &results{}); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			if string(got) != tc.want {
				t.Fatalf("spliced:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestParseCommitTime(t *testing.T) {
	ts, ok := parseCommitTime("COMMIT 1234 (at 2026-12-02 18:50:03.123456+00)")
	if !ok || !ts.Equal(time.Date(2026, 12, 2, 18, 50, 3, 123456000, time.UTC)) {
		t.Fatalf("got %v %v", ts, ok)
	}
	if ts, ok := parseCommitTime("COMMIT 7 (at 2026-12-02 20:20:03.5+05:30)"); !ok || ts.UTC().Hour() != 14 {
		t.Fatalf("offset: got %v %v", ts, ok)
	}
	for _, bad := range []string{"BEGIN 1234", "COMMIT 1234", "table public.t: INSERT: x[integer]:1", "COMMIT 1 (at nonsense)"} {
		if _, ok := parseCommitTime(bad); ok {
			t.Fatalf("%q parsed", bad)
		}
	}
}

func TestParseListeners(t *testing.T) {
	in := "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n" +
		"   0: 0100007F:4AA4 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 12345 1 0 100 0 0 10 0\n" +
		"   1: 0100007F:4AA4 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000  1000        0 12399 1 0 100 0 0 10 0\n" +
		"   2: 0100007F:4AA5 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 22222 1 0 100 0 0 10 0\n"
	got := parseListeners(bufio.NewScanner(strings.NewReader(in)), 19108)
	if len(got) != 1 || got[0] != "12345" {
		t.Fatalf("got %v", got)
	}
}
