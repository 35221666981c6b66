package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// command is one node of the command tree: a command ("run") or a verb of
// a group ("slot status"), declared with its flags and its body. The
// dispatcher parses and validates before the body runs, so walking the
// tree lists every flag without running anything (knownEnv, the bad-input
// and help tests, docs/configuration.md).
type command struct {
	// name is the command line that selects it: "run", "slot status".
	name string
	// args describes its positional arguments in the usage line, e.g.
	// " EVENT_ID"; empty for a command that takes none.
	args string
	// summary is its --help text.
	summary string
	// scope selects the shared flags it takes (config.bind).
	scope scope
	// bind registers the command's own flags on b, beyond its scope's,
	// and returns its body, which reads them once they are parsed. nil:
	// no flags of its own, and body below.
	bind func(b *envflag.Binder) body
	body body
}

// body is a command's work, with its parsed and validated configuration.
type body func(ctx context.Context, x *invocation) error

// invocation is what a body gets: the configuration, the positional
// arguments and the streams (stderr redacts secrets).
type invocation struct {
	cfg    *config
	args   []string
	stdout io.Writer
	stderr *cliStderr
}

// commandTree is every command and verb (a function, not a variable: no
// globals). Their order is the tree's listing order.
func commandTree() []command {
	return []command{
		migrateCommand(), runCommand(),
		slotCommand("status"), slotCommand("create"), slotCommand("drop"),
		dlqCommand("list"), dlqCommand("show"), dlqCommand("retry"), dlqCommand("discard"),
		checkpointCommand("show"), checkpointCommand("reset"),
		recoverCommand(), replayCommand(), cleanupCommand(), doctorCommand(), reconcileCommand(),
	}
}

// groups are the commands that take a verb, with the usage they print
// without one.
var groups = map[string]string{"slot": slotUsage, "dlq": dlqUsage, "checkpoint": checkpointUsage}

// find returns the command args select and the rest of args. A group's
// --help is its usage on stdout; a group without a known verb prints its
// usage on stderr, a usage error.
func find(args []string, stderr io.Writer) (command, []string, error) {
	name, rest := args[0], args[1:]
	gusage, group := groups[name]
	if group {
		switch {
		case len(rest) > 0 && isHelp(rest[0]):
			return command{}, nil, &helpRequest{gusage}
		case len(rest) == 0:
			fmt.Fprint(stderr, gusage)
			return command{}, nil, errUsage
		}
		name, rest = name+" "+rest[0], rest[1:]
	}
	for _, c := range commandTree() {
		if c.name == name {
			return c, rest, nil
		}
	}
	if group {
		fmt.Fprint(stderr, gusage)
		return command{}, nil, fmt.Errorf("%w: unknown %s command %q", errUsage, args[0], args[1])
	}
	fmt.Fprintf(stderr, "outbox-relay: unknown command %q\n\n%s", args[0], usage)
	return command{}, nil, errPrinted
}

// errPrinted is a usage error already explained on stderr: exit 2, and
// nothing more to print.
var errPrinted = fmt.Errorf("%w (printed)", errUsage)

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// register registers c's flags on b, bound to a new config, and returns
// both with c's body.
func (c command) register(b *envflag.Binder) (*config, body) {
	cfg := &config{}
	cfg.bind(b, c.scope)
	if c.bind != nil {
		return cfg, c.bind(b)
	}
	return cfg, c.body
}

// configure parses c's command line (flags, their environment fallbacks
// and positional arguments), checks the environment for unknown
// variables, gives out the secrets to mask and the flag names of the
// configuration fields, and validates. Flags may follow positional
// arguments (dlq show ID --json).
func configure(c command, args []string, out *cliStderr) (*config, body, []string, error) {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	// The flag package prints the whole usage before any parse error;
	// run prints the one-line error instead, and --help's usage to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	b := envflag.New(fs, envPrefix)
	cfg, body := c.register(b)
	var rest []string
	for {
		if err := b.Parse(args); err != nil {
			var ve *envflag.ValueError
			switch {
			case errors.Is(err, flag.ErrHelp):
				return nil, nil, nil, &helpRequest{commandUsage(c, b)}
			case errors.As(err, &ve):
				return nil, nil, nil, configError{err}
			}
			return nil, nil, nil, &usageError{c.name, err}
		}
		if fs.NArg() == 0 {
			break
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if c.args == "" && len(rest) > 0 {
		return nil, nil, nil, fmt.Errorf("%w: unexpected arguments %v", errUsage, rest)
	}
	cfg.flagText = envflag.FlagText(flagNames(b))
	out.flagText = cfg.flagText
	// Before validate: a misspelt variable explains a missing or default
	// value better than the error about that value would.
	if err := checkEnv(os.Environ(), b.EnvNames()); err != nil {
		return nil, nil, nil, err
	}
	out.Add(secrets(b)...)
	if err := cfg.validate(b, c.scope); err != nil {
		return nil, nil, nil, configError{err}
	}
	// Every command that connects warns about the settings that weaken
	// a secure setup, not only run: replay, recover, dlq, doctor and
	// reconcile send the same credentials.
	if c.scope&(scopeDB|scopeKafka) != 0 {
		cfg.warnInsecure(newLogger(cfg, out), c.scope&scopeKafka != 0)
	}
	return cfg, body, rest, nil
}

// commandUsage is a command's --help text.
func commandUsage(c command, b *envflag.Binder) string {
	var w strings.Builder
	fmt.Fprintf(&w, "Usage: outbox-relay %s [flags]%s\n\n%s\n\nFlags:\n", c.name, c.args, c.summary)
	b.PrintDefaults(&w)
	return w.String()
}

// visitFlags calls visit with the flags of every command and verb,
// registered on a Binder that reads no environment.
func visitFlags(visit func(c command, b *envflag.Binder, fs *flag.FlagSet)) {
	for _, c := range commandTree() {
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		b := envflag.Listing(fs, envPrefix)
		c.register(b)
		visit(c, b, fs)
	}
}
