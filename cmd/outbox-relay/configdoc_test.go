package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// docs/configuration.md is generated from the command tree: each
// command's description and flags, as --help shows them. The test fails when the
// file is stale; regenerate it with
//
//	go test ./cmd/outbox-relay -run TestConfigurationDoc -update
var updateDocs = flag.Bool("update", false, "rewrite docs/configuration.md from the flag sets")

const configDocPath = "../../docs/configuration.md"

func TestConfigurationDoc(t *testing.T) {
	sweep(t)
	if !golden(t, configDocPath, renderConfigDoc(t), "TestConfigurationDoc") {
		t.Fatalf("docs/configuration.md is stale (a flag, default or help text changed); regenerate it:\n" +
			"  go test ./cmd/outbox-relay -run TestConfigurationDoc -update")
	}
}

// golden compares got with the file at path, or with -update writes it
// there; it reports whether they matched. test names the test to
// regenerate it with.
func golden(t *testing.T, path, got, test string) bool {
	t.Helper()
	if *updateDocs {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return true
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v; generate it: go test ./cmd/outbox-relay -run %s -update", err, test)
	}
	return string(want) == got
}

// docCommand is one subcommand as the top-level usage lists it.
type docCommand struct{ args, summary string }

// usageCommands lists the commands of the tree, with their help, and
// version, so a new subcommand appears in the reference without editing
// this test.
func usageCommands(t *testing.T) []docCommand {
	t.Helper()
	k, err := newParser(envflag.NewEnv(config.EnvPrefix), io.Discard, new(bool))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []docCommand
	for _, leaf := range k.Model.Leaves(true) {
		cmds = append(cmds, docCommand{args: leaf.Path(), summary: leaf.Help})
	}
	return append(cmds, docCommand{"version", "print the version (also --version)"})
}

// docFlag is one flag of a subcommand's --help.
type docFlag struct{ name, typ, env, def, help string }

// zeroDefault reports whether def is the zero value of its kind, which
// the reference does not list as a default.
func zeroDefault(kind envflag.Kind, def string) bool {
	switch kind {
	case envflag.KindString, envflag.KindList:
		return def == ""
	case envflag.KindBool:
		return def == "false"
	case envflag.KindDuration:
		return def == "0s" || def == "0"
	}
	return def == "0"
}

// helpOf runs `outbox-relay <args> --help` in-process with a clean
// environment (flag defaults read OUTBOX_RELAY_* and GOMAXPROCS) and
// returns its usage text.
func helpOf(t *testing.T, args string) string {
	t.Helper()
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, config.EnvPrefix) || k == "GOMAXPROCS" {
			os.Unsetenv(k)
			t.Cleanup(func() { os.Setenv(k, v) })
		}
	}
	var out, errOut bytes.Buffer
	if code := run(append(strings.Fields(args), "--help"), &out, &errOut); code != 0 {
		t.Fatalf("%s --help: exit %d: %s", args, code, errOut.String())
	}
	return out.String() + errOut.String()
}

// docOf is a command's description and flags, from the command tree: its
// about and its flags' model, as --help prints them. A group (checkpoint)
// has its usage text's description and no flags. Call helpOf first: the
// defaults read GOMAXPROCS.
func docOf(t *testing.T, args string) (desc string, flags []docFlag) {
	t.Helper()
	if !slices.Contains(commandNames(), args) {
		head, _, _ := strings.Cut(helpOf(t, args), "\nFlags:\n")
		if _, rest, ok := strings.Cut(head, "\n\n"); ok {
			desc = strings.TrimSpace(rest)
		}
		return desc, nil
	}
	env := envflag.NewEnv(config.EnvPrefix)
	var helped bool
	k, err := newParser(env, io.Discard, &helped)
	if err != nil {
		t.Fatal(err)
	}
	node := nodeOf(k, args)
	desc = helpText(args)
	fs := envflag.Flags(node)
	slices.SortFunc(fs, func(a, b *kong.Flag) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range fs {
		kind, secret := envflag.FlagKind(f)
		d := docFlag{name: f.Name, help: strings.ReplaceAll(f.Help, "\n", " ")}
		switch kind {
		case envflag.KindBool:
		case envflag.KindList:
			d.typ = "string"
		default:
			d.typ = string(kind)
		}
		names := env.Names(f)
		d.env = "`" + strings.Join(names, "` or `") + "`"
		if f.HasDefault && !secret && !zeroDefault(kind, f.Default) {
			d.def = f.Default
			if kind == envflag.KindString {
				d.def = strconv.Quote(f.Default)
			}
		}
		if d.typ == "" && d.def == "" {
			d.def = "false"
		}
		flags = append(flags, d)
	}
	return desc, flags
}

// anchor is the id GitHub gives a heading (lower case, spaces to dashes,
// punctuation other than - dropped); flag rows carry the same ids.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

const configDocIntro = "# Configuration reference\n\n" +
	"<!-- Generated from the binary's flag sets by cmd/outbox-relay/configdoc_test.go; do not edit.\n" +
	"     Regenerate: go test ./cmd/outbox-relay -run TestConfigurationDoc -update -->\n\n" +
	"A flag is given as `--name value` or `--name=value` (a boolean as `--name` or `--name=false`); the single-dash\n" +
	"form of earlier releases (`-name value`) is still accepted. A value is taken as given, even one that begins\n" +
	"with `-` (`--kafka-sasl-password -Xy7` or `-kafka-sasl-password -Xy7`): the single-dash form applies to\n" +
	"flags only, not to the value after a flag nor to anything after `--`.\n\n" +
	"Every flag has an environment fallback: `--database-url` is `OUTBOX_RELAY_DATABASE_URL`. A flag\n" +
	"on the command line wins over the environment, which wins over the default. Secrets (the database\n" +
	"URL, the SASL password) may also come from a file named by the variable with a `_FILE` suffix, so\n" +
	"they appear neither in the environment nor in `ps`; setting both the variable and its `_FILE` is an\n" +
	"error. A malformed environment value is a configuration error (exit code 2), never silently ignored.\n\n" +
	"So is an `OUTBOX_RELAY_*` variable that no flag reads, most likely a misspelt name that would\n" +
	"otherwise leave its flag at the default. Every command but `version` (and `--help`) refuses it\n" +
	"before doing anything, one line per variable with the closest known name, exit code 2:\n\n" +
	"```text\n" +
	"$ OUTBOX_RELAY_MAX_INFLIGHT_EVNTS=50000 outbox-relay run\n" +
	"outbox-relay run: unknown environment variable OUTBOX_RELAY_MAX_INFLIGHT_EVNTS (did you mean OUTBOX_RELAY_MAX_INFLIGHT_EVENTS?)\n" +
	"```\n\n" +
	"Known means read by a flag of *any* command: one environment commonly serves several commands\n" +
	"(`migrate`, then `run`, in one container, Compose file or Helm release), so `migrate` accepts\n" +
	"`OUTBOX_RELAY_MAX_INFLIGHT_EVENTS`, a flag of `run` and `recover`, and ignores it. The variables of\n" +
	"this repository's tests and scripts, which CI or `scripts/stack.sh env` may leave in the relay's\n" +
	"environment, are accepted too:\n\n" +
	"%s\n" +
	"Embedding the relay as a Go package instead? The same settings are the fields of `relay.Config`\n" +
	"(`go doc github.com/outbox-relay/outbox-relay/relay Config`); `relay.DefaultConfig()` returns the\n" +
	"defaults below. There a zero field means its default and a knob that can be off is off when negative,\n" +
	"while on the command line every flag shows its default and `0` turns such a knob off.\n\n" +
	"Exit codes: see [Exit codes](#exit-codes).\n\n" +
	"## Commands\n\n| Command | What it does |\n|---|---|\n"

// docRow is one row of the flag table: a flag and the commands taking it.
type docRow struct {
	f      docFlag
	cmds   []string
	anchor string
}

// docSection is one command's section.
type docSection struct {
	cmd, desc string
	rows      []*docRow
}

func renderConfigDoc(t *testing.T) string {
	var b strings.Builder
	var notFlags strings.Builder
	for _, name := range slices.Sorted(maps.Keys(config.NotFlagEnv)) {
		fmt.Fprintf(&notFlags, "- `%s`: %s\n", name, config.NotFlagEnv[name])
	}
	fmt.Fprintf(&b, configDocIntro, notFlags.String())
	cmds := usageCommands(t)
	for _, c := range cmds {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.args, anchor("outbox-relay "+c.args), mdCell(c.summary))
	}
	sections, rows := collectFlags(t, cmds)
	b.WriteString("\nEach command's section lists its flags; the [flag table](#flags) describes them.\n")
	descs := map[string]string{} // description -> first command with it
	for _, sec := range sections {
		fmt.Fprintf(&b, "\n## outbox-relay %s\n\n", sec.cmd)
		if sec.cmd == "version" {
			b.WriteString("Prints the version. No flags.\n")
			continue
		}
		switch first, seen := descs[sec.desc]; {
		case sec.desc == "":
		case seen:
			fmt.Fprintf(&b, "See [outbox-relay %s](#%s).\n\n", first, anchor("outbox-relay "+first))
		default:
			descs[sec.desc] = sec.cmd
			fmt.Fprintf(&b, "```text\n%s\n```\n\n", sec.desc)
		}
		if len(sec.rows) == 0 {
			b.WriteString("No flags.\n")
			continue
		}
		names := make([]string, len(sec.rows))
		for i, r := range sec.rows {
			names[i] = fmt.Sprintf("[`--%s`](#%s)", r.f.name, r.anchor)
		}
		fmt.Fprintf(&b, "Flags: %s.\n", strings.Join(names, ", "))
	}
	b.WriteString("\n## Flags\n\n| Flag | Environment | Default | Commands | Description |\n|---|---|---|---|---|\n")
	for _, r := range rows {
		f := r.f
		name := "`--" + f.name + "`"
		if f.typ != "" {
			name = "`--" + f.name + " " + f.typ + "`"
		}
		def := ""
		if f.def != "" {
			def = "`" + f.def + "`"
		}
		// Listed even when every command takes it: deploy/helmtest reads
		// the commands of each variable from this column.
		used := strings.Join(r.cmds, ", ")
		fmt.Fprintf(&b, "| <a id=\"%s\"></a>%s | %s | %s | %s | %s |\n", r.anchor, name, f.env, def, used, mdCell(f.help))
	}
	b.WriteString("\n## Exit codes\n\n| Code | Commands | Meaning |\n|---|---|---|\n")
	for _, c := range exitCodes {
		fmt.Fprintf(&b, "| %d | %s | %s |\n", c.code, c.commands, mdCell(c.meaning))
	}
	return b.String()
}

// collectFlags reads every command's --help. A flag is listed once in the
// flag table with the commands that take it; a name whose meaning differs
// by command gets one row per meaning, its anchor naming the command.
func collectFlags(t *testing.T, cmds []docCommand) ([]docSection, []*docRow) {
	var rows []*docRow
	byKey, perName := map[string]*docRow{}, map[string]int{}
	var sections []docSection
	for _, c := range cmds {
		sec := docSection{cmd: c.args}
		if c.args != "version" {
			var flags []docFlag
			sec.desc, flags = docOf(t, c.args)
			for _, f := range flags {
				key := f.name + "\x00" + f.help
				r := byKey[key]
				if r == nil {
					r = &docRow{f: f, anchor: anchor("--" + f.name)}
					if perName[f.name]++; perName[f.name] > 1 {
						r.anchor += "-" + anchor(c.args)
					}
					byKey[key] = r
					rows = append(rows, r)
				}
				r.cmds = append(r.cmds, c.args)
				sec.rows = append(sec.rows, r)
			}
		}
		sections = append(sections, sec)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].f.name < rows[j].f.name })
	return sections, rows
}
