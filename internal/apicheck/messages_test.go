package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Library messages name what the library's user can change: the Go path
// of a field of the configuration they pass - relay.Config's
// "Publish.MaxBatchBytes" for everything the relay and its engine packages
// (publisher, replication, slot, checkpoint, ...) say, "Kafka.TLS.RootCAs"
// or "Kafka.SASL.Username" for what is inside Kafka.TLS (a *tls.Config)
// and Kafka.SASL (a sasl.Mechanism), cleanup's own "Options.OlderThan" -
// never a flag of the binary: an embedder has no flags. The binary names
// its flags in its own answers (configuration errors, a failed command's
// last line) and beside the text in its logs (a "flags" attribute:
// cmd/outbox-relay/internal/config/flagtext.go).
//
// What a library message may name with a flag is a command to run: the
// operator tools of outbox-relay are instructions, not configuration of
// the library ("run `outbox-relay migrate --grant-role ROLE` as an
// admin"). Those are commandInvocations, each the whole command up to its
// flag; TestLibraryMessagesNameNoFlag fails on any other --flag in a
// string literal of a library package (every package but the programs:
// cmd/, examples/, integration/).
var commandInvocations = []string{
	"outbox-relay migrate --grant-role",
	"outbox-relay migrate --failover-slot",
	"outbox-relay checkpoint reset --slot",
	"outbox-relay recover --since",
	"outbox-relay replay --since",
	"outbox-relay replay --all",
}

// flagName matches a flag in a message: --max-batch-bytes.
var flagName = regexp.MustCompile(`--[a-z][a-z0-9-]*[a-z0-9]`)

func TestLibraryMessagesNameNoFlag(t *testing.T) {
	listing := goCmd(t, "list", "-f", `{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}},{{join .IgnoredGoFiles ","}}`, "./...")
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(listing), "\n") {
		parts := strings.SplitN(line, "|", 3)
		rel := strings.TrimPrefix(strings.TrimPrefix(parts[0], module), "/")
		if notAPI.MatchString(rel) {
			continue
		}
		for _, name := range strings.Split(parts[2], ",") {
			if name == "" || strings.HasSuffix(name, "_test.go") {
				continue
			}
			files++
			for _, v := range flagsNamed(t, filepath.Join(parts[1], name)) {
				t.Errorf("%s: %s in %q: name the configuration field (its Go path, e.g. Publish.MaxBatchBytes) instead; "+
					"a command to run belongs in commandInvocations", v.pos, v.flag, v.text)
			}
		}
	}
	if files < 100 {
		t.Fatalf("only %d library files checked", files)
	}
}

type flagUse struct {
	pos        token.Position
	flag, text string
}

// flagsNamed lists the flags the string literals of a Go file name outside
// commandInvocations.
func flagsNamed(t *testing.T, path string) []flagUse {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var uses []flagUse
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return true
		}
		s, err := strconv.Unquote(lit.Value)
		if err != nil {
			t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
		}
		for _, m := range flagName.FindAllStringIndex(s, -1) {
			if !invocation(s, m[0], s[m[0]:m[1]]) {
				uses = append(uses, flagUse{fset.Position(lit.Pos()), s[m[0]:m[1]], s})
			}
		}
		return true
	})
	return uses
}

// invocation reports whether flag, at index at of s, ends one of the
// commandInvocations.
func invocation(s string, at int, flag string) bool {
	for _, inv := range commandInvocations {
		if strings.HasSuffix(inv, " "+flag) && strings.HasSuffix(s[:at+len(flag)], inv) {
			return true
		}
	}
	return false
}

// TestInvocationAllowsCommandsOnly: the allowlist takes a flag only after
// its command.
func TestInvocationAllowsCommandsOnly(t *testing.T) {
	for s, want := range map[string]bool{
		"run `outbox-relay migrate --grant-role ROLE` as an admin":        true,
		"run \"outbox-relay checkpoint reset --slot x\"":                  true,
		"then run outbox-relay migrate --failover-slot=false again":       true,
		"choose another name with --slot":                                 false,
		"migrate --grant-role ROLE":                                       false,
		"outbox-relay migrate --grant-role ROLE and --kafka-tls":          false,
		"outbox-relay run --cleanup-older-than deletes acknowledged rows": false,
	} {
		ok := true
		for _, m := range flagName.FindAllStringIndex(s, -1) {
			ok = ok && invocation(s, m[0], s[m[0]:m[1]])
		}
		if ok != want {
			t.Errorf("%q: allowed %v, want %v", s, ok, want)
		}
	}
}
