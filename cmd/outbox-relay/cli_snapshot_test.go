package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCLISnapshots compares what users see - help, usage errors, version -
// with the golden files in testdata/cli, exit code and both streams. After
// an intended change regenerate them with
//
//	go test ./cmd/outbox-relay -run TestCLISnapshots -update
func TestCLISnapshots(t *testing.T) {
	cleanEnv := func(t *testing.T) { helpOf(t, "migrate") } // unsets OUTBOX_RELAY_* and GOMAXPROCS
	withStack := []string{"OUTBOX_RELAY_DATABASE_URL=postgres://u@h:5432/db", "OUTBOX_RELAY_KAFKA_BROKERS=a:9092"}
	for _, c := range []struct {
		name string
		args []string
		env  []string
	}{
		{"no-args", nil, nil},
		{"help", []string{"--help"}, nil},
		{"help-run", []string{"help", "run"}, nil},
		{"run-help", []string{"run", "--help"}, nil},
		{"slot-help", []string{"slot", "--help"}, nil},
		{"dlq-list-help", []string{"dlq", "list", "--help"}, nil},
		{"checkpoint-show-help", []string{"checkpoint", "show", "--help"}, nil},
		{"mistyped-flag", []string{"run", "--max-inflight-byte", "16MiB"}, withStack},
		{"invalid-value-flag", []string{"run", "--max-inflight-bytes", "lots"}, withStack},
		{"invalid-value-env", []string{"run"}, append([]string{"OUTBOX_RELAY_MAX_INFLIGHT_BYTES=lots"}, withStack...)},
		{"unknown-env", []string{"run"}, append([]string{"OUTBOX_RELAY_MAX_INFLIGHT_EVNTS=50000"}, withStack...)},
		{"version", []string{"version"}, nil},
		{"version-flag", []string{"--version"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			cleanEnv(t)
			for _, kv := range c.env {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			code := run(c.args, &out, &errOut)
			got := fmt.Sprintf("$ outbox-relay %s\nexit %d\n--- stdout\n%s--- stderr\n%s", strings.Join(c.args, " "), code, out.String(), errOut.String())
			// The Go release differs between machines.
			got = strings.ReplaceAll(got, runtime.Version(), "GOVERSION")
			path := filepath.Join("testdata", "cli", c.name+".golden")
			if !golden(t, path, got, "TestCLISnapshots") {
				want, _ := os.ReadFile(path)
				t.Errorf("output differs from %s (regenerate with -update if intended):\n--- got\n%s\n--- want\n%s", path, got, want)
			}
		})
	}
}

// TestHelpSnapshots keeps the --help of every command and verb, listed
// from the commands themselves (a new one gets its golden file on the
// first -update), as testdata/cli/help/<command>[-<verb>].golden: a change
// of the CLI's implementation (a CLI library) shows here as the diff of
// what users read, and each difference must be deliberate.
//
//	go test ./cmd/outbox-relay -run TestHelpSnapshots -update
func TestHelpSnapshots(t *testing.T) {
	for _, name := range commandNames() {
		lines := [][]string{strings.Fields(name)}
		for _, args := range lines {
			t.Run(strings.Join(args, "-"), func(t *testing.T) {
				got := helpOf(t, strings.Join(args, " "))
				got = strings.ReplaceAll(got, runtime.Version(), "GOVERSION")
				path := filepath.Join("testdata", "cli", "help", strings.Join(args, "-")+".golden")
				if !golden(t, path, got, "TestHelpSnapshots") {
					want, _ := os.ReadFile(path)
					t.Errorf("--help differs from %s (regenerate with -update if intended):\n--- got\n%s\n--- want\n%s", path, got, want)
				}
			})
		}
	}
}
