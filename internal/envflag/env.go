package envflag

import (
	"fmt"
	"os"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/internal/secretfile"
)

// Env is every flag's environment fallback, a kong.Resolver: a flag left
// off the command line takes PREFIX_NAME (OUTBOX_RELAY_MAX_BATCH for
// --max-batch), and a secret one PREFIX_NAME_FILE instead, a file holding
// the value (a mounted Kubernetes secret). A value is checked as the
// flag's would be (Parse); a malformed one is a *ValueError naming the
// variable, and a secret's value is never quoted.
type Env struct {
	prefix string
	lookup func(string) (string, bool)
	set    map[string]bool
	// errs are the malformed variables, by flag: reported with the
	// command's other configuration errors, each once.
	errs map[string]error
	// secretFiles are the files secrets were read from, for the
	// permission warning.
	secretFiles []string
}

// NewEnv returns the environment fallback of the flags, with prefix
// ("OUTBOX_RELAY_"), reading the process environment.
func NewEnv(prefix string) *Env {
	return &Env{prefix: prefix, lookup: os.LookupEnv, set: map[string]bool{}, errs: map[string]error{}}
}

// Reset forgets what the last parse resolved, for the next.
func (e *Env) Reset() {
	clear(e.set)
	clear(e.errs)
	e.secretFiles = nil
}

// Name is the variable of flag name: prefix + NAME_IN_CAPITALS.
func (e *Env) Name(flag string) string {
	return e.prefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// Names are the variables of flag f: its own, and for a secret its _FILE.
func (e *Env) Names(f *kong.Flag) []string {
	names := []string{e.Name(f.Name)}
	if f.Tag.Has("secret") {
		names = append(names, e.Name(f.Name)+"_FILE")
	}
	return names
}

// Validate implements kong.Resolver: nothing to check up front.
func (e *Env) Validate(*kong.Application) error { return nil }

// Resolve implements kong.Resolver: the value of flag f from the
// environment, nil when its variables are unset. A malformed value is
// recorded (Errs) and the flag keeps its default, so every problem of the
// configuration is reported at once.
func (e *Env) Resolve(_ *kong.Context, _ *kong.Path, f *kong.Flag) (any, error) {
	if !Configures(f) {
		return nil, nil
	}
	v, err := e.value(f)
	if err != nil {
		e.errs[f.Name] = err
		return nil, nil
	}
	return v, nil
}

// value is flag f's value from the environment, nil when unset.
func (e *Env) value(f *kong.Flag) (any, error) {
	name := e.Name(f.Name)
	_, secret := FlagKind(f)
	v, ok := e.lookup(name)
	if secret {
		if path, file := e.lookup(name + "_FILE"); file {
			if ok {
				return nil, fmt.Errorf("both %s and %s_FILE are set: keep one", name, name)
			}
			s, err := secretfile.Read(path)
			if err != nil {
				return nil, fmt.Errorf("%s_FILE: %w (point it at a readable file holding the value)", name, err)
			}
			if _, err := Parse(f, s); err != nil {
				return nil, fmt.Errorf("%s_FILE: the value: %w", name, err)
			}
			e.secretFiles = append(e.secretFiles, path)
			v, ok = s, true
		}
	}
	if !ok {
		return nil, nil
	}
	if _, err := Parse(f, v); err != nil {
		return nil, &ValueError{Source: name + "=", Value: v, Err: err, Secret: secret}
	}
	e.set[f.Name] = true
	return v, nil
}

// Check checks the variables of flags that the command line overrode:
// a malformed variable is refused even where it is not used, as it would
// be where it is.
func (e *Env) Check(flags []*kong.Flag) {
	for _, f := range flags {
		if _, err := e.value(f); err != nil {
			e.errs[f.Name] = err
		}
	}
}

// Errs are the malformed variables, in the flags' order.
func (e *Env) Errs(flags []*kong.Flag) []error {
	var errs []error
	for _, f := range flags {
		if err, ok := e.errs[f.Name]; ok {
			errs = append(errs, err)
		}
	}
	return errs
}

// IsSet reports whether the environment gave flag its value (a
// malformed one does not count).
func (e *Env) IsSet(flag string) bool { return e.set[flag] && e.errs[flag] == nil }

// SecretFiles are the files secrets were read from.
func (e *Env) SecretFiles() []string { return e.secretFiles }
