package main

import (
	"io"
	"strings"
	"testing"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// parse configures command name ("run", "dlq list") from args, as the
// dispatcher does, writing its warnings to stderr (a *redact.Writer is
// used as it is, so a test sees what it masks).
func parse(name string, args []string, stderr io.Writer) (*config.Config, error) {
	rw, ok := stderr.(*redact.Writer)
	if !ok {
		rw = redact.NewWriter(stderr)
	}
	_, x, err := configure(append(strings.Fields(name), args...), &cliStderr{Writer: rw})
	if err != nil {
		return nil, err
	}
	return x.cfg, nil
}

// everyFlag lists every flag of every command and verb, by command
// line ("dlq show"), from the command tree: a new flag is covered without
// being named here.
func everyFlag(t *testing.T) map[string][]*kong.Flag {
	t.Helper()
	out := map[string][]*kong.Flag{}
	visitCommands(func(name string, node *kong.Node, _ *envflag.Env) { out[name] = envflag.Flags(node) })
	return out
}

// TestTreeCommands: every command of the tree describes itself (about),
// and every group's verbs are its group's.
func TestTreeCommands(t *testing.T) {
	seen := map[string]bool{}
	visitCommands(func(name string, node *kong.Node, _ *envflag.Env) {
		if seen[name] {
			t.Errorf("%q twice", name)
		}
		seen[name] = true
		if _, ok := node.Target.Addr().Interface().(cmd); !ok {
			t.Errorf("%q: no Run", name)
		}
		if b, err := helpFiles.ReadFile("help/" + strings.ReplaceAll(name, " ", "-") + ".txt"); err != nil || len(b) < 2 {
			t.Errorf("%q: no help text: %v", name, err)
		}
		if group, _, ok := strings.Cut(name, " "); ok && node.Parent.Path() != group {
			t.Errorf("%q: %s is no group", name, group)
		}
	})
	if len(seen) != 16 {
		t.Errorf("%d commands, want 16", len(seen))
	}
}

// visitCommands calls visit with every command of the tree and its node,
// in a model built without reading the environment's values.
func visitCommands(visit func(name string, node *kong.Node, env *envflag.Env)) {
	var helped bool
	env := envflag.NewEnv(config.EnvPrefix)
	k, err := newParser(env, io.Discard, &helped)
	if err != nil {
		panic(err) // the tree is static: its tests fail first
	}
	for _, leaf := range k.Model.Leaves(true) {
		var names []string
		for n := leaf; n != nil && n.Type == kong.CommandNode; n = n.Parent {
			names = append([]string{n.Name}, names...)
		}
		visit(strings.Join(names, " "), leaf, env)
	}
}

// commandFlags are the flags of command name, from its model.
func commandFlags(name string) []*kong.Flag {
	var helped bool
	k, err := newParser(envflag.NewEnv(config.EnvPrefix), io.Discard, &helped)
	if err != nil {
		panic(err) // the tree is static: its tests fail first
	}
	return envflag.Flags(nodeOf(k, name))
}

// TestScopeOf: each command's scope, derived from the flag groups it
// embeds, is the one it declared before (an about method per command).
func TestScopeOf(t *testing.T) {
	db, kafka, run, migrate := config.ScopeDB, config.ScopeKafka, config.ScopeRun, config.ScopeMigrate
	want := map[string]config.Scope{
		"migrate": db | migrate, "run": db | kafka | run, "recover": db | kafka | run,
		"slot status": db, "slot create": db, "slot drop": db,
		"dlq list": db, "dlq show": db, "dlq retry": db | kafka, "dlq discard": db | kafka,
		"checkpoint show": db, "checkpoint reset": db, "cleanup": db,
		"replay": db | kafka, "doctor": db | kafka, "reconcile": db | kafka,
	}
	visitCommands(func(name string, node *kong.Node, _ *envflag.Env) {
		if got := config.ScopeOf(node.Target.Type()); got != want[name] {
			t.Errorf("%s: scope %b, want %b", name, got, want[name])
		}
	})
}

// commandNames are the command lines of every command and verb, in the
// tree's order ("migrate", "slot status").
func commandNames() []string {
	k, err := newParser(envflag.NewEnv(config.EnvPrefix), io.Discard, new(bool))
	if err != nil {
		panic(err) // the tree is static: its tests fail first
	}
	var names []string
	for _, leaf := range k.Model.Leaves(true) {
		names = append(names, leaf.Path())
	}
	return names
}

// knownEnv returns the environment variables of every flag of every
// command and verb, walking the command tree.
func knownEnv() map[string]bool {
	env := envflag.NewEnv(config.EnvPrefix)
	k, err := newParser(env, io.Discard, new(bool))
	if err != nil {
		return map[string]bool{}
	}
	return knownEnvOf(k.Model, env)
}
