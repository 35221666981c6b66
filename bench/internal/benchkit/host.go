package benchkit

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Host is the machine and the versions a run measured on, as its report
// states them and its results.json stores them.
type Host struct {
	CPUs         int    `json:"cpus"`
	CPUModel     string `json:"cpu_model"`
	LoadStart    string `json:"loadavg_start"`
	LoadEnd      string `json:"loadavg_end"` // LoadAvg() when the run ends
	GoVersion    string `json:"go"`
	PGVersion    string `json:"postgres"`
	KafkaVersion string `json:"kafka"`
	Commit       string `json:"commit"`
}

// ReadHost reads the machine at the start of a run: its CPUs, load
// average, Go version, the server_version of the PostgreSQL behind pool,
// and the commit of the git checkout the bench runs in. kafkaVersion is
// taken as given. report, when not "", is the file the run writes its
// section to: its changes do not count as uncommitted, since an earlier
// run's section in it is not a change to what is measured. What cannot
// be read stays "" (CPUModel on arm64, for one).
func ReadHost(ctx context.Context, pool *pgxpool.Pool, kafkaVersion, report string) Host {
	h := Host{CPUs: runtime.NumCPU(), CPUModel: cpuModel(), LoadStart: LoadAvg(), GoVersion: runtime.Version(), KafkaVersion: kafkaVersion}
	_ = pool.QueryRow(ctx, `SHOW server_version`).Scan(&h.PGVersion)
	h.Commit = gitCommit(ctx, report)
	return h
}

// gitCommit is HEAD's short hash, with " (+ uncommitted changes)" when a
// tracked file other than exclude differs from it, or "" outside a git
// checkout.
func gitCommit(ctx context.Context, exclude string) string {
	out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	commit := strings.TrimSpace(string(out))
	spec := []string{"status", "--porcelain", "--untracked-files=no"}
	if exclude != "" {
		spec = append(spec, "--", ":(top)")
		if top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output(); err == nil {
			abs, _ := filepath.Abs(exclude)
			if rel, err := filepath.Rel(strings.TrimSpace(string(top)), abs); err == nil && !strings.HasPrefix(rel, "..") {
				spec = append(spec, ":(top,exclude)"+filepath.ToSlash(rel))
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "git", spec...).Output(); err == nil && len(out) > 0 {
		commit += " (+ uncommitted changes)"
	}
	return commit
}

// Describe is the machine and versions as the reports' header states
// them, one clause without a final period: "2 CPUs (model), load average
// … at the start and … at the end (other work shares this machine);
// PostgreSQL …, Kafka … (single KRaft node), go…, commit …".
func (h Host) Describe() string {
	return fmt.Sprintf("%d CPUs (%s), load average %s at the start and %s at the end (other work shares this machine); "+
		"PostgreSQL %s, Kafka %s (single KRaft node), %s, commit %s",
		h.CPUs, h.CPUModel, h.LoadStart, h.LoadEnd, h.PGVersion, h.KafkaVersion, h.GoVersion, h.Commit)
}
