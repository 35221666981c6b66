package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/process"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/internal/cleanup"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The command tree, declared for kong (github.com/alecthomas/kong): each
// command is an options struct, its flags the fields of the groups it
// embeds (flags.go) and its own, its work a run method. kong parses a
// command line into it; the flags' environment fallback (envflag.Env, a
// kong resolver), their bounds (envflag's mappers) and defaults (those of
// relay.Config, filled into the model: defaults) plug into kong, and
// walking the model lists every flag (knownEnv, the tests, the generated
// docs/configuration.md).
type cli struct {
	Migrate    migrateCmd   `cmd:""`
	Run        runCmd       `cmd:""`
	Slot       slotGroup    `cmd:""`
	Dlq        dlqGroup     `cmd:""`
	Checkpoint cpGroup      `cmd:""`
	Recover    recoverCmd   `cmd:""`
	Replay     replayCmd    `cmd:""`
	Cleanup    cleanupCmd   `cmd:""`
	Doctor     doctorCmd    `cmd:""`
	Reconcile  reconcileCmd `cmd:""`
}

type slotGroup struct {
	Status slotCmd       `cmd:""`
	Create slotCreateCmd `cmd:""`
	Drop   slotCmd       `cmd:""`
}

type dlqGroup struct {
	List    dlqListCmd    `cmd:""`
	Show    dlqShowCmd    `cmd:""`
	Retry   dlqRetryCmd   `cmd:""`
	Discard dlqDiscardCmd `cmd:""`
}

type cpGroup struct {
	Show  checkpointCmd `cmd:""`
	Reset checkpointCmd `cmd:""`
}

// cmd is a command of the tree.
type cmd interface {
	// about describes it (name, its command line: "slot drop") for
	// --help and says which shared flags are validated (scope).
	about(name string) about
	// run is its work, with the configuration parsed and validated.
	run(ctx context.Context, x *invocation) error
}

// about is what --help says of a command, and its scope.
type about struct {
	// args describes its positional arguments in the usage line, e.g.
	// " EVENT_ID".
	args    string
	summary string
	scope   config.Scope
	// unused are flags of the groups it embeds that it does not use
	// (slot status never reads --table). Given on its command line they
	// are refused; from the environment, which the commands of one
	// deployment share, they are ignored. --help leaves them out.
	unused []string
}

// invocation is what a command's run gets: the configuration, the
// command line ("dlq show") and the streams (stderr redacts secrets).
type invocation struct {
	cfg    *config.Config
	name   string
	stdout io.Writer
	stderr *cliStderr
}

// verbOf is the verb of a group's command line ("drop" of "slot drop").
func verbOf(name string) string {
	_, verb, _ := strings.Cut(name, " ")
	return verb
}

// groups are the commands that take a verb, with the usage they print
// without one.
var groups = map[string]string{"slot": slotUsage, "dlq": dlqUsage, "checkpoint": checkpointUsage}

// newParser returns a parser of the tree that resolves the environment
// with env and writes --help to help.
func newParser(grammar any, env *envflag.Env, help io.Writer, helped *bool) (*kong.Kong, error) {
	opts := append(envflag.Options(),
		kong.Name("outbox-relay"),
		kong.Writers(help, io.Discard),
		kong.Exit(func(int) { *helped = true }),
		kong.Help(printHelp(env)),
		kong.Resolvers(env),
		kong.Vars{
			"failover_help": "create the logical slot with failover = true on PostgreSQL 17+, so a standby with sync_replication_slots = on keeps it " +
				"through a failover; false opts out; ignored before 17",
			"max_procs":              strconv.Itoa(process.DefaultMaxProcs()),
			"cleanup_batch_size":     strconv.Itoa(cleanup.DefaultBatchSize),
			"cleanup_max_batch_size": strconv.Itoa(cleanup.MaxBatchSize),
			"cleanup_pause":          cleanup.DefaultPause.String(),
			"dlq_wait":               deadletter.DefaultWait.String(),
		},
		envflag.Defaults("Relay.", relay.DefaultConfig()),
	)
	return kong.New(grammar, opts...)
}

// printHelp is a command's --help: its usage line, summary and flags.
func printHelp(env *envflag.Env) kong.HelpPrinter {
	return func(_ kong.HelpOptions, ctx *kong.Context) error {
		c, ok := selected(ctx)
		if !ok {
			return nil // a group: find prints its usage
		}
		a := c.about(commandName(ctx))
		fmt.Fprintf(ctx.Stdout, "Usage: outbox-relay %s [flags]%s\n\n%s\n\nFlags:\n", ctx.Command(), a.args, a.summary)
		flags := slices.DeleteFunc(slices.Clone(ctx.Flags()), func(f *kong.Flag) bool { return slices.Contains(a.unused, f.Name) })
		envflag.PrintFlags(ctx.Stdout, flags, env)
		return nil
	}
}

// selected is the command ctx selected, if a command (not a group).
func selected(ctx *kong.Context) (cmd, bool) {
	node := ctx.Selected()
	if node == nil {
		return nil, false
	}
	c, ok := node.Target.Addr().Interface().(cmd)
	return c, ok
}

// commandName is the command line of ctx's command, without its
// positional arguments ("dlq show").
func commandName(ctx *kong.Context) string {
	var names []string
	for n := ctx.Selected(); n != nil && n.Type == kong.CommandNode; n = n.Parent {
		names = append([]string{n.Name}, names...)
	}
	return strings.Join(names, " ")
}

// find checks a group's verb before kong parses: a group's --help is its
// usage on stdout; a group without a known verb prints its usage on
// stderr, a usage error; an unknown command prints the usage.
func find(args []string, stderr io.Writer) error {
	gusage, group := groups[args[0]]
	switch {
	case group && len(args) > 1 && isHelp(args[1]):
		return &helpRequest{gusage}
	case group && len(args) == 1:
		fmt.Fprint(stderr, gusage)
		return errUsage
	}
	name := args[0]
	if group {
		name += " " + args[1]
	}
	if slices.Contains(commandNames(), name) {
		return nil
	}
	if group {
		fmt.Fprint(stderr, gusage)
		return fmt.Errorf("%w: unknown %s command %q", errUsage, args[0], args[1])
	}
	fmt.Fprintf(stderr, "outbox-relay: unknown command %q\n\n%s", args[0], usage)
	return errPrinted
}

// commandNames are the command lines of every command and verb, in the
// tree's order ("migrate", "slot status").
func commandNames() []string {
	return envflag.CommandNames(reflect.TypeFor[cli](), func(t reflect.Type) bool {
		return reflect.PointerTo(t).Implements(reflect.TypeFor[cmd]())
	})
}

// commandType is the struct type of command name ("dlq show").
func commandType(name string) reflect.Type { return envflag.CommandType(reflect.TypeFor[cli](), name) }

// grammar is the part of the tree command name needs: kong builds one
// command's model, about a millisecond instead of ten.
func grammar(name string) any { return envflag.Grammar(reflect.TypeFor[cli](), name) }

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// errPrinted is a usage error already explained on stderr: exit 2, and
// nothing more to print.
var errPrinted = fmt.Errorf("%w (printed)", errUsage)

// configure parses a command line (flags, their environment fallbacks,
// positional arguments) into the tree, checks the environment for
// unknown variables, gives out the secrets to mask and the flag names of
// the configuration fields, and validates. It returns the command to run.
func configure(args []string, out *cliStderr) (cmd, *invocation, error) {
	if err := find(args, out); err != nil {
		return nil, nil, err
	}
	name := args[0]
	if groups[name] != "" {
		name += " " + args[1]
	}
	p, err := newCommandParser(name)
	if err != nil {
		return nil, nil, err
	}
	return p.configure(args, out)
}

// commandParser parses the command lines of one command ("dlq show"):
// its kong model, built once (a process parses one line; a test many).
type commandParser struct {
	name   string
	k      *kong.Kong
	env    *envflag.Env
	help   bytes.Buffer
	helped bool
	// valueFlags tells Normalize which flags take the next argument as
	// their value.
	valueFlags func(name string) bool
}

// about is what the command says of itself (cmd.about).
func (p *commandParser) about() about {
	return reflect.New(commandType(p.name)).Interface().(cmd).about(p.name)
}

// newCommandParser returns the parser of command name.
func newCommandParser(name string) (*commandParser, error) {
	p := &commandParser{name: name, env: envflag.NewEnv(config.EnvPrefix)}
	k, err := newParser(grammar(name), p.env, &p.help, &p.helped)
	if err != nil {
		return p, err
	}
	p.k, p.valueFlags = k, envflag.ValueFlags(k.Model)
	return p, nil
}

// configure is configure's work once the command is known.
func (p *commandParser) configure(args []string, out *cliStderr) (cmd, *invocation, error) {
	p.help.Reset()
	p.helped = false
	p.env.Reset()
	name, env := p.name, p.env
	ctx, err := p.k.Parse(envflag.Normalize(args, p.valueFlags))
	switch {
	case p.helped:
		return nil, nil, &helpRequest{p.help.String()}
	case err != nil:
		var ve *envflag.ValueError
		if errors.As(err, &ve) {
			return nil, nil, configError{ve}
		}
		return nil, nil, &usageError{name, parseError(err)}
	}
	c, _ := selected(ctx)
	a := c.about(commandName(ctx))
	set := envflag.NewSet(ctx, env)
	for _, f := range a.unused {
		if set.OnCommandLine(f) {
			return nil, nil, configError{fmt.Errorf("--%s is not used by %s: drop it", f, commandName(ctx))}
		}
	}
	env.Check(set.Flags())
	cfg := &config.Config{}
	cfg.Relay = relay.DefaultConfig()
	set.Fill(cfg)
	set.Fill(c) // the command's own options (cleanup's, replay's)
	// Built when first used (an error, a library's log record): it needs
	// run's model besides this command's.
	names := sync.OnceValue(func() map[string]string { return config.FlagNames(set) })
	text := sync.OnceValue(func() func(string) string { return envflag.FlagText(names()) })
	cfg.FlagText = func(s string) string { return text()(s) }
	cfg.FieldFlags = func(s string) map[string]string { return envflag.FlagsIn(names(), s) }
	out.flagText = cfg.FlagText
	// Before validate: a misspelt variable explains a missing or default
	// value better than the error about that value would.
	if err := config.CheckEnv(os.Environ(), set.EnvNames(), knownEnv); err != nil {
		return nil, nil, err
	}
	out.Add(config.Secrets(set)...)
	if err := cfg.Validate(set, a.scope); err != nil {
		return nil, nil, configError{err}
	}
	// Every command that connects warns about the settings that weaken
	// a secure setup, not only run: replay, recover, dlq, doctor and
	// reconcile send the same credentials.
	if a.scope&(config.ScopeDB|config.ScopeKafka) != 0 {
		cfg.WarnInsecure(newLogger(cfg, out), a.scope&config.ScopeKafka != 0)
	}
	return c, &invocation{cfg: cfg, name: commandName(ctx), stderr: out}, nil
}

// parseError is kong's error about a command line, in the words the
// binary used before: "unknown flag --foo".
func parseError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, ", did you mean"); i > 0 {
		msg = msg[:i]
	}
	return errors.New(msg)
}

// knownEnv returns the environment variables of every flag of every
// command and verb, walking the command tree.
func knownEnv() map[string]bool {
	names := map[string]bool{}
	env := envflag.NewEnv(config.EnvPrefix)
	for _, cmd := range commandNames() {
		envflag.Declared(commandType(cmd), func(tag reflect.StructTag) {
			name := env.Name(tag.Get("name"))
			names[name] = true
			if _, secret := tag.Lookup("secret"); secret {
				names[name+"_FILE"] = true
			}
		})
	}
	return names
}
