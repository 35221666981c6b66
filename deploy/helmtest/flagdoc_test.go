package helmtest

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// configDoc is docs/configuration.md, generated from the binary's flag
// sets (cmd/outbox-relay/configdoc_test.go): what the binary accepts.
const configDoc = "../../docs/configuration.md"

// flagDoc is one row of configuration.md's flag table.
type flagDoc struct {
	name     string // without the dashes
	typ      string // as flag.UnquoteUsage names it: duration, int, string; "" for a bool
	def      string // the default, unquoted
	commands []string
}

// flagTable maps every environment variable of configuration.md's flag
// table ("Environment" column, including the _FILE forms) to its flag.
type flagTable map[string]flagDoc

var (
	flagCell = regexp.MustCompile("`--([a-z0-9-]+)(?: ([a-z0-9]+))?`")
	envName  = regexp.MustCompile("`(OUTBOX_RELAY_[A-Z0-9_]+)`")
)

func parseFlagTable(t *testing.T) flagTable {
	t.Helper()
	table := flagTable{}
	for line := range strings.SplitSeq(readFile(t, configDoc), "\n") {
		if !strings.HasPrefix(line, "| <a id=") {
			continue
		}
		cells := splitRow(line)
		if len(cells) != 5 {
			t.Fatalf("%s: flag row with %d columns, want 5 (flag, environment, default, commands, description): %s", configDoc, len(cells), line)
		}
		m := flagCell.FindStringSubmatch(cells[0])
		if m == nil {
			t.Fatalf("%s: no flag in %q", configDoc, cells[0])
		}
		f := flagDoc{name: m[1], typ: m[2], def: strings.Trim(cells[2], "`\""), commands: strings.Split(cells[3], ", ")}
		for _, env := range envName.FindAllStringSubmatch(cells[1], -1) {
			if prev, ok := table[env[1]]; ok {
				// The same flag on other commands (--checkpoint-retention
				// of run and of doctor): one variable, every command.
				f.commands = append(f.commands, prev.commands...)
			}
			table[env[1]] = f
		}
	}
	if len(table) < 40 {
		t.Fatalf("%s: only %d environment variables found; has the flag table's format changed?", configDoc, len(table))
	}
	return table
}

// splitRow splits a Markdown table row into its trimmed cells; \| is a
// literal bar.
func splitRow(line string) []string {
	line = strings.ReplaceAll(strings.Trim(strings.TrimSpace(line), "|"), `\|`, "\x00")
	var cells []string
	for c := range strings.SplitSeq(line, "|") {
		cells = append(cells, strings.ReplaceAll(strings.TrimSpace(c), "\x00", "|"))
	}
	return cells
}

// check reports whether the environment variable env, set to value, is
// one command takes and its flag parses value. _FILE variables name a file
// and are checked by the caller.
func (ft flagTable) check(env, value, command string) error {
	f, ok := ft[env]
	if !ok {
		return fmt.Errorf("%s is not an environment variable of any flag in %s", env, configDoc)
	}
	if !slices.Contains(f.commands, command) {
		return fmt.Errorf("%s (--%s) is not a flag of %q; it applies to %s", env, f.name, command, strings.Join(f.commands, ", "))
	}
	if strings.HasSuffix(env, "_FILE") {
		return nil
	}
	return f.accepts(value)
}

// accepts parses value with the binary's own parser for the flag's type
// (internal/envflag); named string types (`--grant-role run`) take any
// text.
func (f flagDoc) accepts(value string) error {
	var err error
	switch f.typ {
	case "duration":
		_, err = envflag.ParseDuration(value)
	case "size":
		_, err = envflag.ParseSize(value)
	case "int", "int64":
		_, err = strconv.ParseInt(value, 10, 64)
	case "uint", "uint64":
		_, err = strconv.ParseUint(value, 10, 64)
	case "float64":
		_, err = strconv.ParseFloat(value, 64)
	case "":
		_, err = strconv.ParseBool(value)
	}
	if err != nil {
		return fmt.Errorf("--%s (%s) does not accept %q: %w", f.name, typeName(f.typ), value, err)
	}
	return nil
}

func typeName(typ string) string {
	if typ == "" {
		return "bool"
	}
	return typ
}

// TestFlagTableParses guards the parser against a change of the generated
// table: known rows must come out with their types and commands.
func TestFlagTableParses(t *testing.T) {
	ft := parseFlagTable(t)
	for env, want := range map[string]flagDoc{
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT":         {name: "shutdown-timeout", typ: "duration"},
		"OUTBOX_RELAY_DATABASE_URL_FILE":        {name: "database-url", typ: "string"},
		"OUTBOX_RELAY_CREATE_TOPICS":            {name: "create-topics"},
		"OUTBOX_RELAY_MAX_INFLIGHT_EVENTS":      {name: "max-inflight-events", typ: "int"},
		"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE": {name: "kafka-sasl-password", typ: "string"},
	} {
		got, ok := ft[env]
		if !ok || got.name != want.name || got.typ != want.typ || !slices.Contains(got.commands, "run") {
			t.Errorf("%s: got %+v, want --%s of type %q for run", env, got, want.name, want.typ)
		}
	}
	if err := ft.check("OUTBOX_RELAY_SHUTDOWN_TIMEOUT", "half a minute", "run"); err == nil {
		t.Error("check accepted a malformed duration")
	}
	if err := ft.check("OUTBOX_RELAY_GRANT_ROLE", "x", "run"); err == nil {
		t.Error("check accepted a migrate-only variable for run")
	}
}
