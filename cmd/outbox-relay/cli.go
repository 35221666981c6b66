package main

import (
	"bytes"
	"context"
	"embed"
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
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/flagtext"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/internal/cleanup"
	"github.com/outbox-relay/outbox-relay/internal/deadletter"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/relay"
)

// The command tree, declared for kong (github.com/alecthomas/kong): each
// command is an options struct, its flags the fields of the groups it
// embeds (flags.go) and its own, its work a Run method that ctx.Run calls
// with the invocation bound. kong parses a command line into it, selects
// the command and prints the help of the tree and its groups (help tags);
// the flags' environment fallback (envflag.Env, a kong resolver), their
// bounds (envflag's mappers) and defaults (those of relay.Config, filled
// into the model: defaults) plug into kong, and walking the model lists
// every flag (knownEnv, the tests, the generated docs/configuration.md).
//
// A command's --help text is its file in help/ (helpText); the groups it
// embeds set which of its flags Validate checks (config.ScopeOf); its
// unused tag lists the flags of those groups it does not use (slot status
// never reads --table). Given on its command line they are refused; from
// the environment, which the commands of one deployment share, they are
// ignored. --help leaves them out.
type cli struct {
	Version    kong.VersionFlag `name:"version" help:"print the version and exit (also: outbox-relay version)"`
	Migrate    migrateCmd       `cmd:"" help:"create or upgrade the outbox table, its publication and the slot"`
	Run        runCmd           `cmd:"" help:"stream outbox inserts from the slot to Kafka"`
	Slot       slotGroup        `cmd:"" help:"the logical replication slot: status, create, drop"`
	Dlq        dlqGroup         `cmd:"" help:"the dead-letter table: list, show, retry and discard poison and parked events"`
	Checkpoint cpGroup          `cmd:"" help:"the saved position: show, reset"`
	Recover    recoverCmd       `cmd:"" help:"recreate a missing or lost slot and back-fill from the outbox table"`
	Replay     replayCmd        `cmd:"" help:"re-publish events still in the outbox table (marked as replayed)" unused:"publication"`
	Cleanup    cleanupCmd       `cmd:"" help:"delete confirmed outbox rows older than --older-than (batched; drops old partitions)" unused:"publication"`
	Doctor     doctorCmd        `cmd:"" help:"check PostgreSQL settings, publication and slot; print fixes"`
	Reconcile  reconcileCmd     `cmd:"" help:"compare the outbox with Kafka (and a consumer's inbox); exit 3 if missing" unused:"slot,publication"`
}

// description is the tree's --help text above its commands.
const description = `outbox-relay relays a PostgreSQL transactional outbox to Kafka.

Every flag has an OUTBOX_RELAY_* environment fallback, e.g. --database-url
and OUTBOX_RELAY_DATABASE_URL; an OUTBOX_RELAY_* variable no flag reads is an
error.`

type slotGroup struct {
	Status slotCmd       `cmd:"" help:"show the slot's position, lag and WAL health (JSON)" unused:"table"`
	Create slotCreateCmd `cmd:"" help:"create the publication (if missing) and the slot (pgoutput)"`
	Drop   slotCmd       `cmd:"" help:"drop the slot" unused:"table"`
}

type dlqGroup struct {
	List    dlqListCmd    `cmd:"" help:"list poison and parked events (dead-letter table), in commit order" unused:"slot,publication"`
	Show    dlqShowCmd    `cmd:"" help:"show one dead-letter entry (JSON)" unused:"slot,publication"`
	Retry   dlqRetryCmd   `cmd:"" help:"re-publish a quarantined aggregate's events in order" unused:"idempotent"`
	Discard dlqDiscardCmd `cmd:"" help:"discard a poison event (with a reason); its aggregate continues" unused:"idempotent"`
}

// Help is the dlq group's --help text (kong.HelpProvider).
func (dlqGroup) Help() string { return helpText("dlq") + "\n" }

type cpGroup struct {
	Show  checkpointCmd `cmd:"" help:"show the newest saved position of the slot (JSON), compared with the slot and the server"`
	Reset checkpointCmd `cmd:"" help:"delete the slot's checkpoints (after a deliberate restore or re-initialisation)" unused:"publication,replication-url"`
}

// cmd is a command of the tree: its work, with the configuration parsed
// and validated. Its --help text is help/<command line>.txt (helpText).
type cmd interface {
	Run(ctx context.Context, x *invocation) error
}

// helpFiles are the commands' --help texts, one file per command line
// ("slot-drop.txt"), and dlq.txt the group's.
//
//go:embed help/*.txt
var helpFiles embed.FS

// helpText is the --help text of command line name ("slot drop").
func helpText(name string) string {
	b, err := helpFiles.ReadFile("help/" + strings.ReplaceAll(name, " ", "-") + ".txt")
	if err != nil {
		panic(err) // the tree is static: TestTreeCommands fails first
	}
	return strings.TrimSuffix(string(b), "\n")
}

// unused are the flags the unused tag of node lists.
func unused(node *kong.Node) []string {
	if u := node.Tag.Get("unused"); u != "" {
		return strings.Split(u, ",")
	}
	return nil
}

// invocation is what a command's Run gets: the configuration, the
// command line ("dlq show") and the streams (stderr redacts secrets).
type invocation struct {
	cfg    *config.Config
	name   string
	stdout io.Writer
	stderr *cliStderr
	kctx   *kong.Context
}

// run runs the command kong selected (ctx.Run), with ctx and x bound.
func (x *invocation) run(ctx context.Context) error {
	x.kctx.BindTo(ctx, (*context.Context)(nil))
	return x.kctx.Run(x)
}

// newParser returns a parser of the tree that resolves the environment
// with env and writes --help (and --version) to help.
func newParser(env *envflag.Env, help io.Writer, helped *bool) (*kong.Kong, error) {
	opts := append(envflag.Options(),
		kong.Name("outbox-relay"),
		kong.Description(description),
		kong.Writers(help, io.Discard),
		kong.Exit(func(int) { *helped = true }),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true, WrapUpperBound: 100}),
		kong.ValueFormatter(func(v *kong.Value) string { return v.Help + env.HelpSuffix(v.Flag) }),
		kong.Resolvers(env),
		kong.Vars{
			"version": versionLine(),
			"failover_help": "create the logical slot with failover = true on PostgreSQL 17+, so a standby with sync_replication_slots = on keeps it " +
				"through a failover; false opts out; ignored before 17",
			"max_procs":              strconv.Itoa(process.DefaultMaxProcs()),
			"cleanup_batch_size":     strconv.Itoa(cleanup.DefaultBatchSize),
			"cleanup_max_batch_size": strconv.Itoa(cleanup.MaxBatchSize),
			"cleanup_pause":          cleanup.DefaultPause.String(),
			"dlq_wait":               deadletter.DefaultWait.String(),
		},
		envflag.Defaults("Relay.", relay.DefaultConfig()),
		kong.PostBuild(describe), // after Defaults: it reads them
	)
	return kong.New(&cli{}, opts...)
}

// describe gives each command's node its --help text (helpText) and
// hides the flags it does not use.
func describe(k *kong.Kong) error {
	for _, leaf := range k.Model.Leaves(true) {
		leaf.Detail = helpText(leaf.Path())
		for _, f := range leaf.Flags {
			f.Hidden = f.Hidden || slices.Contains(unused(leaf), f.Name)
			if kind, _ := envflag.FlagKind(f); f.Default == "" && kind != envflag.KindList {
				f.PlaceHolder = strings.ToUpper(string(kind)) // --database-url=STRING, not =""
			} else if f.Default == "" {
				f.PlaceHolder = "URL" // doctor's --standby-url, the only list
			}
		}
	}
	return nil
}

// commandName is the command line ctx selected, without its positional
// arguments ("dlq show"; kong's Node.Path), "" before one is.
func commandName(ctx *kong.Context) string {
	if n := ctx.Selected(); n != nil {
		return n.Path()
	}
	return ""
}

// nodeOf is the node of command line name in k's model ("dlq show").
func nodeOf(k *kong.Kong, name string) *kong.Node {
	for _, n := range k.Model.Leaves(true) {
		if n.Path() == name {
			return n
		}
	}
	panic("no command " + name) // the tree is static: its tests fail first
}

// configure parses a command line (flags, their environment fallbacks,
// positional arguments) into the tree, checks the environment for
// unknown variables, gives out the secrets to mask and the flag names of
// the configuration fields, and validates. It returns the command to run.
func configure(args []string, out *cliStderr) (cmd, *invocation, error) {
	p, err := newCommandParser(args[0])
	if err != nil {
		return nil, nil, err
	}
	return p.configure(args, out)
}

// commandParser parses command lines: its kong model, built once (a
// process parses one line; a test many). name is the command a test
// parses ("dlq show").
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

// newCommandParser returns the parser of command name.
func newCommandParser(name string) (*commandParser, error) {
	p := &commandParser{name: name, env: envflag.NewEnv(config.EnvPrefix)}
	k, err := newParser(p.env, &p.help, &p.helped)
	if err != nil {
		return p, err
	}
	p.k, p.valueFlags = k, envflag.ValueFlags(k.Model)
	return p, nil
}

// configure is configure's work.
func (p *commandParser) configure(args []string, out *cliStderr) (cmd, *invocation, error) {
	p.help.Reset()
	p.helped = false
	p.env.Reset()
	env := p.env
	ctx, err := p.k.Parse(envflag.Normalize(args, p.valueFlags))
	switch {
	case p.helped:
		return nil, nil, &helpRequest{p.help.String()}
	case err != nil:
		var ve *envflag.ValueError
		if errors.As(err, &ve) {
			return nil, nil, configError{ve}
		}
		var pe *kong.ParseError
		name := ""
		if errors.As(err, &pe) {
			name = commandName(pe.Context)
		}
		return nil, nil, &usageError{name, err}
	}
	c := ctx.Selected().Target.Addr().Interface().(cmd) // a group alone is a ParseError
	scope := config.ScopeOf(reflect.TypeOf(c).Elem())
	set := envflag.NewSet(ctx, env)
	for _, f := range unused(ctx.Selected()) {
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
	names := sync.OnceValue(func() *flagtext.Table {
		return flagtext.NewTable(config.FlagNames(set, envflag.Names(envflag.Flags(nodeOf(p.k, "run")))))
	})
	cfg.FlagText = func(s string) string { return names().Replace(s) }
	cfg.FieldFlags = func(s string) map[string]string { return names().Find(s) }
	out.flagText = cfg.FlagText
	// Before validate: a misspelt variable explains a missing or default
	// value better than the error about that value would.
	if err := config.CheckEnv(os.Environ(), set.EnvNames(), func() map[string]bool { return knownEnvOf(p.k.Model, env) }); err != nil {
		return nil, nil, err
	}
	out.Add(config.Secrets(set)...)
	if err := cfg.Validate(set, scope); err != nil {
		return nil, nil, configError{err}
	}
	// Every command that connects warns about the settings that weaken
	// a secure setup, not only run: replay, recover, dlq, doctor and
	// reconcile send the same credentials.
	if scope&(config.ScopeDB|config.ScopeKafka) != 0 {
		cfg.WarnInsecure(newLogger(cfg, out), scope&config.ScopeKafka != 0)
	}
	return c, &invocation{cfg: cfg, name: commandName(ctx), stderr: out, kctx: ctx}, nil
}

// knownEnvOf is knownEnv of the tree model, whose variables env names.
func knownEnvOf(model *kong.Application, env *envflag.Env) map[string]bool {
	names := map[string]bool{}
	_ = kong.Visit(model, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok && envflag.Configures(f) {
			for _, name := range env.Names(f) {
				names[name] = true
			}
		}
		return next(nil)
	})
	return names
}
