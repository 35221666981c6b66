package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// badValues are the inputs every flag of a kind gets. malformed ones are
// never a value of the kind: the command must refuse them. edge ones are
// well-formed but empty, zero, negative or huge: a command refuses them
// unless acceptedEdge lists the flag and value with the reason it is valid.
var badValues = map[envflag.Kind]struct{ malformed, edge []string }{
	envflag.KindInt:      {malformed: []string{"abc", "1.5", "1e3", "99999999999999999999", ""}, edge: []string{"0", "-1", "2147483648"}},
	envflag.KindDuration: {malformed: []string{"abc", "10", "1e300d", "9999999999h", ""}, edge: []string{"0", "-1s", "876000h"}},
	envflag.KindSize:     {malformed: []string{"lots", "1.5.5MiB", "99999999999999999999", ""}, edge: []string{"0", "-1", "1EiB"}},
	envflag.KindBool:     {malformed: []string{"maybe", "2"}},
	envflag.KindString:   {edge: []string{"", "line\nbreak", strings.Repeat("x", 1<<16)}},
	envflag.KindList:     {edge: []string{"", "line\nbreak", strings.Repeat("x", 1<<16)}},
}

// documentedZero matches usage text that gives 0 a meaning ("0
// disables", "0: off", "0 keeps the server's setting").
var documentedZero = regexp.MustCompile(`\b0(:| disables| keeps| means)`)

// meant reports whether a well-formed edge value v of flag f has a meaning
// its usage states. Every other edge value but the default must be
// refused; a new flag gets this rule without being named here.
func meant(f *kong.Flag, v string) bool {
	usage := f.Help
	switch {
	case v == "":
		return strings.Contains(usage, "empty")
	case v == "0":
		return documentedZero.MatchString(usage)
	case strings.HasPrefix(v, "-"):
		return strings.Contains(usage, "negative") || strings.Contains(usage, v+" ") || strings.Contains(usage, v+":")
	}
	return false
}

// positional are the arguments a command line needs besides flags.
var positional = map[string][]string{
	"dlq show":    {"0f8fad5b-d9cb-469f-a165-70867728950e"},
	"dlq retry":   {"0f8fad5b-d9cb-469f-a165-70867728950e"},
	"dlq discard": {"0f8fad5b-d9cb-469f-a165-70867728950e", "--reason", "test"},
	"cleanup":     {"--older-than", "7d"},
	"reconcile":   {"--since", "1h"},
	"replay":      {"--all"},
}

// defaultOf is flag f's default as text; without one, its kind's zero.
func defaultOf(f *kong.Flag, kind envflag.Kind) string {
	if f.HasDefault {
		return f.Default
	}
	return map[envflag.Kind]string{envflag.KindInt: "0", envflag.KindSize: "0", envflag.KindDuration: "0s", envflag.KindBool: "false"}[kind]
}

type outcome struct {
	code           int
	stdout, stderr string
}

// errorLines are stderr's lines but for log records (JSON): a command that
// logs before its own checks (the connection security line) still says
// what is wrong in one line.
func (o outcome) errorLines() int {
	n := 0
	for _, l := range strings.Split(strings.TrimSuffix(o.stderr, "\n"), "\n") {
		if !strings.HasPrefix(l, `{"level":`) {
			n++
		}
	}
	return n
}

// attempt runs a command line the way main does, with a cancelled
// context: a configuration that passes validation stops at its first
// connection (exit 1), one that does not exits 2.
func attempt(t *testing.T, p *commandParser, args []string) outcome {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	stderr := &cliStderr{Writer: redact.NewWriter(&errOut)}
	line := append(append(strings.Fields(p.name), positional[p.name]...), args...)
	_, x, err := p.configure(line, stderr)
	if err == nil {
		x.stdout = &out
		err = x.run(ctx)
	}
	code := outcomeOf(line[0], err, &out, stderr)
	return outcome{code, out.String(), errOut.String()}
}

func TestBadInputEveryFlag(t *testing.T) {
	sweep(t)
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_* and GOMAXPROCS
	base := map[string]string{
		config.EnvPrefix + "DATABASE_URL":  "postgres://relay@127.0.0.1:1/app",
		config.EnvPrefix + "KAFKA_BROKERS": "127.0.0.1:1",
		config.EnvPrefix + "METRICS_ADDR":  "127.0.0.1:0",
	}
	for k, v := range base {
		t.Setenv(k, v)
	}
	flags := everyFlag(t)
	for _, cmd := range slices.Sorted(func(yield func(string) bool) {
		for k := range flags {
			if !yield(k) {
				return
			}
		}
	}) {
		p, err := newCommandParser(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if o := attempt(t, p, nil); o.code == exitUsage || o.errorLines() > 1 {
			t.Errorf("%s: the base command line is refused: %s", cmd, o.stderr)
			continue
		}
		for _, f := range flags[cmd] {
			kind, _ := envflag.FlagKind(f)
			vals, ok := badValues[kind]
			if !ok {
				t.Errorf("%s --%s: no bad values for kind %q", cmd, f.Name, kind)
				continue
			}
			check := func(v string, mustRefuse bool) {
				o := attempt(t, p, []string{"--" + f.Name + "=" + v})
				desc := fmt.Sprintf("%s --%s=%.40q", cmd, f.Name, v)
				if s := o.stdout + o.stderr; strings.Contains(s, "panic") || strings.Contains(s, "goroutine ") {
					t.Errorf("%s: panicked:\n%.2000s", desc, s)
					return
				}
				// The default, given explicitly, may be refused (a
				// required flag's empty default) or taken.
				isDefault := v == defaultOf(f, kind) || kind == envflag.KindDuration && v == "0" && defaultOf(f, kind) == "0s"
				accepted := !mustRefuse && meant(f, v)
				switch {
				case o.code == exitUsage && o.errorLines() != 1:
					t.Errorf("%s: exit 2 with %d lines, want one:\n%.2000s", desc, o.errorLines(), o.stderr)
				case isDefault && !mustRefuse:
				case o.code == exitUsage && accepted:
					t.Errorf("%s: refused, but the flag's default or usage gives it a meaning: %s", desc, o.stderr)
				case o.code != exitUsage && !accepted:
					t.Errorf("%s: accepted (exit %d), want exit 2", desc, o.code)
				}
			}
			for _, v := range vals.malformed {
				check(v, true)
				// The same value from the environment: the same refusal.
				env := config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
				t.Setenv(env, v)
				if o := attempt(t, p, nil); o.code != exitUsage || o.errorLines() != 1 || !strings.Contains(o.stderr, env) {
					t.Errorf("%s with %s=%q: exit %d, want 2 with one line naming the variable:\n%.2000s", cmd, env, v, o.code, o.stderr)
				}
				os.Unsetenv(env)
				if old, ok := base[env]; ok {
					os.Setenv(env, old)
				}
			}
			if _, secret := envflag.FlagKind(f); secret {
				// A refused secret is not yet registered for redaction:
				// its error must not quote it.
				o := attempt(t, p, []string{"--" + f.Name + "=s3cr3t\x01"})
				if o.code != exitUsage || strings.Contains(o.stdout+o.stderr, "s3cr3t") {
					t.Errorf("%s --%s with a control character: exit %d, and the output must not show the value:\n%s", cmd, f.Name, o.code, o.stderr)
				}
			}
			unused := slices.Contains(unused(nodeOf(p.k, p.name)), f.Name)
			for _, v := range vals.edge {
				if !unused { // refused whatever its value
					check(v, false)
				}
			}
			if kind != envflag.KindBool {
				checkHyphenValue(t, p, f, kind)
			}
		}
	}
}

// hyphenValue is a value that begins with "-" and a letter, as a
// generated password may.
const hyphenValue = "-Xy7secret"

// checkHyphenValue gives flag f hyphenValue as the next argument, after
// --name and after the single-dash -name that envflag.Normalize rewrites:
// the flag receives it intact (issue 46: Normalize made it "--Xy7secret"),
// a flag of a kind it is no value of refuses it quoting it intact, and a
// secret one's value never shows in the output.
func checkHyphenValue(t *testing.T, p *commandParser, f *kong.Flag, kind envflag.Kind) {
	t.Helper()
	_, secret := envflag.FlagKind(f)
	for _, flag := range []string{"--" + f.Name, "-" + f.Name} {
		o := attempt(t, p, []string{flag, hyphenValue})
		desc := fmt.Sprintf("%s %s %s", p.name, flag, hyphenValue)
		out := o.stdout + o.stderr
		got, parsed := received(p, f.Name)
		switch {
		case secret && strings.Contains(out, hyphenValue[1:]):
			t.Errorf("%s: the secret shows in the output:\n%.2000s", desc, out)
		case kind == envflag.KindString && got != hyphenValue, kind == envflag.KindList && got != "["+hyphenValue+"]":
			t.Errorf("%s: the flag received %q (parsed: %v), want %q:\n%.2000s", desc, got, parsed, hyphenValue, o.stderr)
		case kind == envflag.KindString, kind == envflag.KindList:
		case o.code != exitUsage:
			t.Errorf("%s: accepted (exit %d), want exit 2", desc, o.code)
		case !secret && !strings.Contains(o.stderr, `"`+hyphenValue+`"`):
			t.Errorf("%s: the refusal does not quote the value as given:\n%.2000s", desc, o.stderr)
		}
	}
}

// received is the value flag name of p's model holds after p's last
// parse (Sprint of its target), and whether that parse got that far.
func received(p *commandParser, name string) (string, bool) {
	var got string
	found := false
	for _, f := range envflag.Flags(nodeOf(p.k, p.name)) {
		if f.Name == name && f.Target.IsValid() {
			got, found = fmt.Sprint(f.Target.Interface()), true
		}
	}
	return got, found
}
