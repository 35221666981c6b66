// Command outbox-relay relays a PostgreSQL transactional outbox to Kafka
// through logical replication: at-least-once, in order per aggregate, with
// the slot confirmed only past events Kafka has acknowledged.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/process"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/flagtext"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/outbox-relay/outbox-relay/internal/hint"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code (exitcodes.go):
// 0 on success, 2 on invalid usage or configuration, 1 on a runtime error.
func run(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0: // the tree's help, as a usage error
		run([]string{"--help"}, stdout, stderr)
		return exitUsage
	case args[0] == "help": // help [CMD [VERB]]
		args = append(args[1:], "--help")
	case args[0] == "version":
		args = []string{"--version"}
	}
	// Secrets are registered once the configuration is parsed; from then
	// on nothing printed to stderr (logs, errors) can show them.
	out := &cliStderr{Writer: redact.NewWriter(stderr)}
	ctx, stop := process.Interruptible(out, os.Exit, exitInterrupted)
	defer stop()
	return dispatch(ctx, args, stdout, out)
}

// dispatch runs the command line args with ctx and returns its exit code:
// run's work once the process is set up (tests call it with a cancelled
// ctx, so a command line that passes validation stops at its first
// connection).
func dispatch(ctx context.Context, args []string, stdout io.Writer, out *cliStderr) int {
	return outcomeOf(args[0], execute(ctx, args, stdout, out), stdout, out)
}

// outcomeOf prints the outcome err of command name (its first word) and
// returns its exit code.
func outcomeOf(name string, err error, stdout io.Writer, out *cliStderr) int {
	var stderr io.Writer = out
	var ce configError
	var help *helpRequest
	var nc notCheckedError
	var ue config.UnknownEnvError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &help):
		fmt.Fprint(stdout, help.usage)
		return exitOK
	case errors.As(err, &ue):
		for _, line := range ue.Lines() {
			fmt.Fprintf(stderr, "outbox-relay %s: %s\n", name, line)
		}
		return exitUsage
	case errors.As(err, &ce), errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "outbox-relay %s: %s\n", name, out.text(err))
		return exitUsage
	case errors.Is(err, errMissing):
		fmt.Fprintf(stderr, "outbox-relay %s: %s\n", name, out.text(err))
		return exitMissing
	case errors.As(err, &nc):
		fmt.Fprintf(stderr, "outbox-relay %s: %s\n", name, out.text(hint.With(nc.err)))
		return exitNotChecked
	default:
		fmt.Fprintf(stderr, "outbox-relay %s: %s\n", name, out.text(hint.With(err)))
		return exitFailure
	}
}

// execute parses and validates the command line (configure, cli.go) and
// runs its command.
func execute(ctx context.Context, args []string, stdout io.Writer, out *cliStderr) error {
	_, x, err := configure(args, out)
	if err != nil {
		return err
	}
	x.stdout = stdout
	return x.run(ctx)
}

// cliStderr is run's stderr: it redacts secrets (redact.Writer), and the
// errors run prints name configuration fields by the flags of the command
// (flagText, set by configure: flagtext.go).
type cliStderr struct {
	*redact.Writer
	flagText func(string) string
}

// text is err's text with the fields it names in flag terms.
func (w *cliStderr) text(err error) string {
	if w.flagText == nil {
		return err.Error()
	}
	return w.flagText(err.Error())
}

var errUsage = errors.New("usage error")

// usageError is a command line a command cannot parse (an unknown flag, a
// flag without its value): one line, and where to read the usage, rather
// than the whole usage in front of the one line that matters.
type usageError struct {
	cmd string
	err error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v; see 'outbox-relay %s--help'", e.err, strings.TrimPrefix(e.cmd+" ", " "))
}
func (e *usageError) Is(target error) bool { return target == errUsage }

// helpRequest is a command's --help: run prints usage to stdout, exit 0.
type helpRequest struct{ usage string }

func (h *helpRequest) Error() string        { return "help requested" }
func (h *helpRequest) Is(target error) bool { return target == flag.ErrHelp }

// newLogger builds the process logger: the libraries log through
// *slog.Logger, the binary writes zerolog's JSON (or console) lines, never
// payloads, each with the flags of the configuration fields it names
// (flagtext.Handler).
func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	zerolog.TimeFieldFormat = time.RFC3339Nano
	var out io.Writer = w
	if cfg.LogFormat == "console" {
		out = zerolog.ConsoleWriter{Out: w, TimeFormat: "15:04:05.000"}
	}
	zl := zerolog.New(out).Level(cfg.Level()).With().Timestamp().Str("service", "outbox-relay").Logger()
	return slog.New(flagtext.Handler(zerolog.NewSlogHandler(zl), cfg.Flags))
}

// versionLine is what version and --version print.
func versionLine() string {
	return fmt.Sprintf("outbox-relay %s (revision %s, built %s, %s)",
		buildinfo.Version(), buildinfo.Revision(), buildinfo.BuildDate(), buildinfo.GoVersion())
}

// configError marks an invalid configuration (exit code 2).
type configError struct{ err error }

// Error is one line for one problem, and a list for several (each on its
// own line, so none hides behind the first).
func (e configError) Error() string {
	if msg := e.err.Error(); !strings.Contains(msg, "\n") {
		return "invalid configuration: " + msg
	}
	return "invalid configuration:\n" + indent(e.err.Error())
}
func (e configError) Unwrap() error { return e.err }

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
