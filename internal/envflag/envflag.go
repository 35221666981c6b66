// Package envflag registers command-line flags whose defaults come from
// environment variables (PREFIX_FLAG_NAME), so a container can be
// configured entirely through its environment while a flag on the command
// line still wins. Malformed environment values are collected, not
// ignored: the command reports them with its other configuration errors.
//
// A Binder also records which configuration field each flag sets (a Go
// path such as "Publish.MaxBatch"), so errors a library reports about its
// fields can be printed in the terms of the flags the user typed.
package envflag

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Binder registers flags on a FlagSet with environment fallbacks.
type Binder struct {
	fs     *flag.FlagSet
	prefix string
	errs   []error
	// fields maps config fields to flag names ("--max-batch"), examples
	// the required ones to an example value, and groups a rule over
	// several fields to their flags.
	fields, examples map[string]string
	groups           map[string][]string
}

// New returns a Binder registering on fs; environment variables are
// prefix + the flag name in upper case with dashes as underscores.
func New(fs *flag.FlagSet, prefix string) *Binder {
	return &Binder{fs: fs, prefix: prefix, fields: map[string]string{}, examples: map[string]string{}, groups: map[string][]string{}}
}

// EnvName is the environment variable of flag name.
func (b *Binder) EnvName(name string) string {
	return b.prefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Errs returns the malformed environment values found so far.
func (b *Binder) Errs() []error { return b.errs }

// Binding is a flag just registered.
type Binding struct {
	b    *Binder
	name string
}

// To records that the flag sets field (a Go path such as
// "Publish.MaxBatch").
func (x Binding) To(field string) Binding {
	x.b.fields[field] = "--" + x.name
	return x
}

// Required records field as set by the flag and gives the example value a
// missing value's error suggests.
func (x Binding) Required(field, example string) {
	x.To(field).b.examples[field] = example
}

// Group names the flags of a rule over a group's fields ("Leader"); its
// errors list them with their values.
func (b *Binder) Group(field string, names ...string) {
	Binding{b, names[0]}.To(field)
	b.groups[field] = names
}

// Flag returns the flag ("--max-batch") that sets field, if any.
func (b *Binder) Flag(field string) (string, bool) {
	f, ok := b.fields[field]
	return f, ok
}

func (b *Binder) env(name string) (string, bool) { return os.LookupEnv(b.EnvName(name)) }

func (b *Binder) usage(name, help string) string {
	return fmt.Sprintf("%s (env %s)", help, b.EnvName(name))
}

// envDefault is def, or the environment's value for the flag name parsed
// by parse; a malformed value is recorded ("is not what").
func envDefault[T any](b *Binder, name string, def T, parse func(string) (T, error), what string) T {
	if v, ok := b.env(name); ok {
		t, err := parse(v)
		if err == nil {
			return t
		}
		b.errs = append(b.errs, fmt.Errorf("%s=%q is not %s", b.EnvName(name), v, what))
	}
	return def
}

// String registers a string flag.
func (b *Binder) String(p *string, name, def, help string) Binding {
	if v, ok := b.env(name); ok {
		def = v
	}
	b.fs.StringVar(p, name, def, b.usage(name, help))
	return Binding{b, name}
}

// Secret is String for a secret: its value may also come from the file
// named by <ENV>_FILE (trailing newlines dropped), so it need not sit in
// the environment or on the command line (visible in ps).
func (b *Binder) Secret(p *string, name, def, help string) Binding {
	env := b.EnvName(name)
	if path, ok := os.LookupEnv(env + "_FILE"); ok {
		if _, both := b.env(name); both {
			b.errs = append(b.errs, fmt.Errorf("both %s and %s_FILE are set: keep one", env, env))
		} else if v, err := os.ReadFile(path); err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s_FILE: %w (point it at a readable file holding the value)", env, err))
		} else {
			def = strings.TrimRight(string(v), "\r\n")
		}
	} else if v, ok := b.env(name); ok {
		def = v
	}
	b.fs.StringVar(p, name, def, fmt.Sprintf("%s (env %s or %s_FILE)", help, env, env))
	return Binding{b, name}
}

// Duration registers a time.Duration flag.
func (b *Binder) Duration(p *time.Duration, name string, def time.Duration, help string) Binding {
	def = envDefault(b, name, def, time.ParseDuration, "a duration: use a value like 500ms, 10s or 1m")
	b.fs.DurationVar(p, name, def, b.usage(name, help))
	return Binding{b, name}
}

// Int registers an int flag.
func (b *Binder) Int(p *int, name string, def int, help string) Binding {
	b.fs.IntVar(p, name, envDefault(b, name, def, strconv.Atoi, "an integer"), b.usage(name, help))
	return Binding{b, name}
}

// Int64 registers an int64 flag.
func (b *Binder) Int64(p *int64, name string, def int64, help string) Binding {
	parse := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	b.fs.Int64Var(p, name, envDefault(b, name, def, parse, "an integer"), b.usage(name, help))
	return Binding{b, name}
}

// Bool registers a bool flag.
func (b *Binder) Bool(p *bool, name string, def bool, help string) Binding {
	b.fs.BoolVar(p, name, envDefault(b, name, def, strconv.ParseBool, "a boolean: use true or false"), b.usage(name, help))
	return Binding{b, name}
}

// FieldError renders an error about a config field in flag terms. detail
// is the error's text after the field name (": use 1..100000"); missing
// says the value is required but empty. It returns nil for a field no
// flag sets (the command keeps its default there).
func (b *Binder) FieldError(field string, missing bool, detail string) error {
	name, ok := b.fields[field]
	if !ok {
		return nil
	}
	if ex, ok := b.examples[field]; ok && missing {
		return fmt.Errorf("%s is required: set %s=%s", name, b.EnvName(strings.TrimPrefix(name, "--")), ex)
	}
	if names, ok := b.groups[field]; ok {
		var flags []string
		for _, n := range names {
			flags = append(flags, "--"+n+" "+b.fs.Lookup(n).Value.String())
		}
		name = strings.Join(flags, ", ")
	}
	// detail may name other fields too ("use at least
	// Publish.MaxBatchBytes"): longest first, so that
	// Publish.MaxBatchBytes is not read as Publish.MaxBatch.
	fields := slices.SortedFunc(maps.Keys(b.fields), func(x, y string) int { return len(y) - len(x) })
	var pairs []string
	for _, f := range fields {
		if strings.Contains(f, ".") {
			pairs = append(pairs, f, b.fields[f])
		}
	}
	return fmt.Errorf("%s", strings.NewReplacer(pairs...).Replace(name+detail))
}
