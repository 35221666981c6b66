package main

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
)

// helpEnvNames returns every environment variable the --help of every
// command and verb names (each flag's, and <ENV>_FILE of a secret), by
// command: what a user is told the binary reads.
func helpEnvNames(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string][]string{}
	for _, cmd := range everyCommand(t) {
		helpOf(t, "migrate")
		_, flags := docOf(t, cmd)
		for _, f := range flags {
			for _, m := range regexp.MustCompile("`([A-Z0-9_]+)`").FindAllStringSubmatch(f.env, -1) {
				names[cmd] = append(names[cmd], m[1])
			}
		}
	}
	return names
}

// runWith runs the command line args in-process with env (NAME=value)
// over an environment without OUTBOX_RELAY_* and GOMAXPROCS.
func runWith(t *testing.T, args string, env ...string) (code int, stdout, stderr string) {
	t.Helper()
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_* and GOMAXPROCS until the test ends
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	var out, errOut bytes.Buffer
	code = run(strings.Fields(args), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestUnknownEnvRejected: every command and verb refuses a misspelt
// variable before doing anything: one line naming it and the closest
// known name, exit code 2.
func TestUnknownEnvRejected(t *testing.T) {
	sweep(t)
	cmds := everyCommand(t)
	if len(cmds) < 15 {
		t.Fatalf("only %d commands: %v", len(cmds), cmds)
	}
	for _, cmd := range cmds {
		t.Run(cmd, func(t *testing.T) {
			code, stdout, stderr := runWith(t, cmd, "OUTBOX_RELAY_MAX_INFLIGHT_EVNTS=50000",
				"OUTBOX_RELAY_DATABASE_URL=postgres://u@h:5432/db", "OUTBOX_RELAY_KAFKA_BROKERS=a:9092")
			want := "outbox-relay " + strings.Fields(cmd)[0] +
				": unknown environment variable OUTBOX_RELAY_MAX_INFLIGHT_EVNTS (did you mean OUTBOX_RELAY_MAX_INFLIGHT_EVENTS?)\n"
			if code != exitUsage || stdout != "" || stderr != want {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, exitUsage, want)
			}
		})
	}
}

// TestUnknownEnvLines: one line per unknown variable, in name order, a
// suggestion only when one is close; the value is never printed.
func TestUnknownEnvLines(t *testing.T) {
	code, stdout, stderr := runWith(t, "slot status",
		"OUTBOX_RELAY_SLTO=secret-1",                // swapped letters
		"OUTBOX_RELAY_FROBNICATE=secret-2",          // nothing close
		"OUTBOX_RELAY_SLOT_FILE=secret-3",           // only secrets come from files
		"OUTBOX_RELAY_kafka_brokers=secret-4",       // case
		"OUTBOX_RELAY_TEST_DATABSE_URL=secret-5",    // a test variable, misspelt
		"OUTBOX_RELAY_MAX_INFLIGHT_EVENTS=50000",    // run's: accepted by slot status too
		"OUTBOX_RELAY_DATABASE_URL=postgres://u@h/", // its own
	)
	want := "" +
		"outbox-relay slot: unknown environment variable OUTBOX_RELAY_FROBNICATE\n" +
		"outbox-relay slot: unknown environment variable OUTBOX_RELAY_SLOT_FILE (did you mean OUTBOX_RELAY_SLOT?)\n" +
		"outbox-relay slot: unknown environment variable OUTBOX_RELAY_SLTO (did you mean OUTBOX_RELAY_SLOT?)\n" +
		"outbox-relay slot: unknown environment variable OUTBOX_RELAY_TEST_DATABSE_URL (did you mean OUTBOX_RELAY_TEST_DATABASE_URL?)\n" +
		"outbox-relay slot: unknown environment variable OUTBOX_RELAY_kafka_brokers (did you mean OUTBOX_RELAY_KAFKA_BROKERS?)\n"
	if code != exitUsage || stdout != "" || stderr != want {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit %d, stderr:\n%s", code, stdout, stderr, exitUsage, want)
	}
	// --help still helps, version still answers.
	for _, args := range []string{"slot status --help", "version", "run -h"} {
		if code, stdout, _ := runWith(t, args, "OUTBOX_RELAY_SLTO=x"); code != exitOK || stdout == "" {
			t.Errorf("%s with an unknown variable: exit %d, stdout %q", args, code, stdout)
		}
	}
}

// TestEveryFlagVariableIsAccepted: the variables the binary accepts are
// exactly those of the flags every command's --help lists (so a new flag
// is never refused), and each command accepts every command's variables:
// one environment serves migrate, run and the rest.
func TestEveryFlagVariableIsAccepted(t *testing.T) {
	sweep(t)
	byCmd := helpEnvNames(t)
	all := map[string]bool{}
	for _, names := range byCmd {
		for _, n := range names {
			all[n] = true
		}
	}
	known := knownEnv()
	if !maps.Equal(known, all) {
		for n := range all {
			if !known[n] {
				t.Errorf("%s is a flag's variable in --help but unknown to the check", n)
			}
		}
		for n := range known {
			if !all[n] {
				t.Errorf("%s is known to the check but no --help names it", n)
			}
		}
	}
	if !all["OUTBOX_RELAY_DATABASE_URL_FILE"] || !all["OUTBOX_RELAY_STANDBY_URL_FILE"] || !all["OUTBOX_RELAY_MAX_INFLIGHT_EVENTS"] {
		t.Fatalf("variables missing from the --help texts: %v", slices.Sorted(maps.Keys(all)))
	}
	env := []string{"OUTBOX_RELAY_LOG_LEVEL=nonsense"} // a flag of every command: stops each before any connection
	for n := range all {
		if n != "OUTBOX_RELAY_LOG_LEVEL" {
			env = append(env, n+"=x")
		}
	}
	for cmd := range byCmd {
		code, _, stderr := runWith(t, cmd, env...)
		if code != exitUsage || strings.Contains(stderr, "unknown environment variable") || !strings.Contains(stderr, `--log-level "nonsense"`) {
			t.Errorf("%s with every command's variables: exit %d:\n%s", cmd, code, stderr)
		}
	}
}

// TestNotFlagEnvAccepted: the variables of the tests and scripts, which
// CI, make and the test harness may leave in the relay's environment, are
// accepted.
func TestNotFlagEnvAccepted(t *testing.T) {
	known := knownEnv()
	var env []string
	for name, reader := range config.NotFlagEnv {
		if !strings.HasPrefix(name, config.EnvPrefix) || reader == "" || known[name] {
			t.Errorf("config.NotFlagEnv[%s] = %q: want an OUTBOX_RELAY_* name no flag reads, and who reads it", name, reader)
		}
		env = append(env, name+"=1")
	}
	if err := config.CheckEnv(env, nil, knownEnv); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"migrate", "run", "dlq list"} {
		code, _, stderr := runWith(t, cmd, env...)
		if code != exitUsage || strings.Contains(stderr, "unknown environment variable") || !strings.Contains(stderr, "--database-url is required") {
			t.Errorf("%s with the tests' variables: exit %d:\n%s", cmd, code, stderr)
		}
	}
}

// notVariables are OUTBOX_RELAY_* names the repository writes that are
// nobody's variable: examples and placeholders.
var notVariables = map[string]bool{
	"OUTBOX_RELAY_MAX_INFLIGHT_EVNTS": true, // the misspelling docs/configuration.md shows refused
	"OUTBOX_RELAY_FLAG_NAME":          true, // deploy/helm/outbox-relay/README.md: the variable of a flag-name
}

// TestRepositoryVariablesAreAccepted: every OUTBOX_RELAY_* name in the
// repository (Go, scripts, Makefile, CI, Helm chart, compose file,
// Dockerfile, docs, examples) is a flag's or in config.NotFlagEnv, so no
// variable the tests, scripts or examples set beside the relay stops it.
// The tests of this package and their golden files use made-up names on
// purpose and are left out.
func TestRepositoryVariablesAreAccepted(t *testing.T) {
	known := knownEnv()
	name := regexp.MustCompile(`OUTBOX_RELAY_[A-Z0-9_]*[A-Z0-9]`)
	root, files := filepath.Join("..", ".."), 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case ".git", ".stack", "bin", "dist", filepath.Join("cmd", "outbox-relay", "testdata"):
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Dir(rel) == filepath.Join("cmd", "outbox-relay") && strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if info, err := d.Info(); err != nil || !d.Type().IsRegular() || info.Size() > 4<<20 {
			return err
		}
		text, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(text, 0) >= 0 { // binaries built here
			return err
		}
		files++
		for _, n := range name.FindAll(text, -1) {
			if n := string(n); !known[n] && config.NotFlagEnv[n] == "" && !notVariables[n] {
				t.Errorf("%s: %s is neither a flag's variable nor in config.NotFlagEnv (internal/config/envcheck.go): the relay refuses it", rel, n)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("scanned only %d files under %s", files, root)
	}
}
