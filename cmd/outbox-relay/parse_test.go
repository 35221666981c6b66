package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// parse configures a command of scope s named name (with summary) from
// args, as the dispatcher does, writing its warnings to stderr.
func parse(name, summary string, args []string, s scope, stderr io.Writer) (*config, error) {
	cfg, _, err := parseWith(name, "", summary, args, s, stderr, nil)
	return cfg, err
}

// parseWith is parse with flags of the command's own (extra) and
// positional arguments (described by argsUsage; returned).
func parseWith(name, argsUsage, summary string, args []string, s scope, stderr io.Writer, extra func(*envflag.Binder)) (*config, []string, error) {
	c := command{name: name, args: argsUsage, summary: summary, scope: s, bind: func(b *envflag.Binder) body {
		if extra != nil {
			extra(b)
		}
		return nil
	}}
	out, ok := stderr.(*cliStderr)
	if !ok {
		rw, ok := stderr.(*redact.Writer)
		if !ok {
			rw = redact.NewWriter(stderr)
		}
		out = &cliStderr{Writer: rw}
	}
	cfg, _, rest, err := configure(c, args, out)
	return cfg, rest, err
}

// commandNames are the command lines of every command and verb, in the
// tree's order.
func commandNames() []string {
	var names []string
	for _, c := range commandTree() {
		names = append(names, c.name)
	}
	return names
}

// commandFlags lists every flag of every command and verb, by command
// line ("dlq show"), from the command tree: a new flag is covered without
// being named here.
func commandFlags(t *testing.T) map[string][]*flag.Flag {
	t.Helper()
	out := map[string][]*flag.Flag{}
	visitFlags(func(c command, _ *envflag.Binder, fs *flag.FlagSet) {
		fs.VisitAll(func(f *flag.Flag) { out[c.name] = append(out[c.name], f) })
	})
	return out
}

// TestTreeNamesAreUnique: one command line selects one command, and every
// group's verbs are in the tree.
func TestTreeNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range commandNames() {
		if seen[name] {
			t.Errorf("%q twice", name)
		}
		seen[name] = true
		if group, _, ok := strings.Cut(name, " "); ok && groups[group] == "" {
			t.Errorf("%q: %s is no group", name, group)
		}
	}
}
