package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// relayFeatures are the record-format flags the relay binary offers, read
// from `outbox-relay run --help`.
type relayFeatures struct {
	recordFormat bool   // --record-format
	expandFlag   string // the flag that turns Debezium payload expansion on ("" if none)
	// tombstones: run --tombstone-on-null-payload and migrate
	// --nullable-payload.
	tombstones bool
}

var flagRE = regexp.MustCompile(`(?m)^\s+-(-?[a-z0-9-]+)`)

// probeRelay reads the relay's run and migrate flags.
func probeRelay(ctx context.Context, bin string) (relayFeatures, error) {
	var help [2]string
	for i, cmd := range []string{"run", "migrate"} {
		out, err := exec.CommandContext(ctx, bin, cmd, "--help").CombinedOutput()
		if len(out) == 0 && err != nil {
			return relayFeatures{}, fmt.Errorf("%s %s --help: %w", bin, cmd, err)
		}
		help[i] = string(out)
	}
	return parseRelayHelp(help[0], help[1]), nil
}

// parseRelayHelp finds --record-format, a flag whose name says Debezium
// JSON expansion (e.g. --debezium-expand-json-payload) and the tombstone
// flags in the help texts of run and migrate.
func parseRelayHelp(runHelp, migrateHelp string) relayFeatures {
	var f relayFeatures
	tombstones, nullable := false, false
	for _, m := range flagRE.FindAllStringSubmatch(migrateHelp, -1) {
		nullable = nullable || strings.TrimPrefix(m[1], "-") == "nullable-payload"
	}
	for _, m := range flagRE.FindAllStringSubmatch(runHelp, -1) {
		name := strings.TrimPrefix(m[1], "-")
		switch {
		case name == "record-format":
			f.recordFormat = true
		case name == "tombstone-on-null-payload":
			tombstones = true
		case strings.Contains(name, "expand") && (strings.Contains(name, "json") || strings.Contains(name, "debezium") || strings.Contains(name, "payload")):
			f.expandFlag = "--" + name
		}
	}
	f.tombstones = tombstones && nullable
	return f
}

// relayEnv is the relay's environment: this process's without any
// OUTBOX_RELAY_* setting, so only the flags the run passes apply.
func relayEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OUTBOX_RELAY_") {
			env = append(env, kv)
		}
	}
	return env
}

// relaySide is one `outbox-relay run` of the run: its slot and topics.
type relaySide struct {
	name     string
	table    string
	slot     string
	pub      string
	template string // --topic-template
	format   string // --record-format ("" leaves the flag out)
	extra    []string
}

// startRelay starts the relay for s, logging to dir/<name>.log. It
// serves no metrics (several run at once, and beside other people's).
func (r *run) startRelay(dir string, s relaySide) (*proc, error) {
	argv := []string{r.cfg.relay, "run",
		"--database-url", r.cfg.databaseURL,
		"--kafka-brokers", strings.Join(r.cfg.brokers, ","),
		"--table", s.table,
		"--slot", s.slot,
		"--publication", s.pub,
		"--topic-template", s.template,
		"--metrics-addr", "",
	}
	if s.format != "" {
		argv = append(argv, "--record-format", s.format)
	}
	argv = append(argv, s.extra...)
	return startProc("relay "+s.name, argv, relayEnv(), filepath.Join(dir, s.name+".log"), "")
}

// migrate runs `outbox-relay migrate` for table: the table (its payload
// nullable with nullable), its publication and the relay's slot.
func (r *run) migrate(ctx context.Context, table, slot, pub string, nullable bool) error {
	args := []string{"migrate", "--database-url", r.cfg.databaseURL, "--table", table, "--slot", slot, "--publication", pub}
	if nullable {
		args = append(args, "--nullable-payload")
	}
	cmd := exec.CommandContext(ctx, r.cfg.relay, args...)
	cmd.Env = relayEnv()
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(r.cfg.logDir, "migrate-"+slot+".log"), out, 0o644)
	if err != nil {
		return fmt.Errorf("outbox-relay migrate --table %s: %w: %s", table, err, strings.TrimSpace(string(out)))
	}
	return nil
}
