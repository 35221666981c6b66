package benchkit

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

func TestHostDescribe(t *testing.T) {
	h := Host{CPUs: 2, CPUModel: "Test CPU", LoadStart: "0.50 0.40 0.30", LoadEnd: "1.00 0.80 0.60",
		GoVersion: "go1.26.8", PGVersion: "15.18", KafkaVersion: "4.1.1", Commit: "1234567"}
	want := "2 CPUs (Test CPU), load average 0.50 0.40 0.30 at the start and 1.00 0.80 0.60 at the end (other work shares this machine); " +
		"PostgreSQL 15.18, Kafka 4.1.1 (single KRaft node), go1.26.8, commit 1234567"
	if got := h.Describe(); got != want {
		t.Fatalf("Describe:\n%s\nwant\n%s", got, want)
	}
	// results.json keeps the names it had.
	data, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"cpus":2`, `"cpu_model":`, `"loadavg_start":`, `"loadavg_end":`, `"go":`, `"postgres":`, `"kafka":`, `"commit":`} {
		if !strings.Contains(string(data), k) {
			t.Fatalf("%s lacks %s", data, k)
		}
	}
}

func TestGitCommit(t *testing.T) {
	if exec.Command("git", "rev-parse", "HEAD").Run() != nil {
		t.Skip("not in a git checkout")
	}
	for _, exclude := range []string{"", "docs/benchmarks.md"} {
		if c := gitCommit(context.Background(), exclude); c == "" || strings.ContainsAny(c[:1], " \n") {
			t.Fatalf("commit %q (exclude %q)", c, exclude)
		}
	}
}
