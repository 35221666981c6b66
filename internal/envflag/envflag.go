// Package envflag registers command-line flags whose defaults come from
// environment variables (PREFIX_FLAG_NAME), so a container can be
// configured entirely through its environment while a flag on the command
// line still wins. Malformed environment values are collected, not
// ignored: the command reports them with its other configuration errors.
//
// A Binder also records which configuration field each flag sets (a Go
// path such as "Publish.MaxBatch"), so errors a library reports about its
// fields can be printed in the terms of the flags the user typed. The path
// is derived from the pointer a flag is bound to, within the structs
// registered with Fields, so it cannot drift from the field.
package envflag

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/secretfile"
)

// Binder registers flags on a FlagSet with environment fallbacks.
type Binder struct {
	fs     *flag.FlagSet
	prefix string
	// lookup reads an environment variable: os.LookupEnv, or nothing for
	// a Listing Binder.
	lookup func(string) (string, bool)
	// envNames are the variables the registered flags read (EnvNames).
	envNames []string
	errs     []error
	// malformed are the flags whose environment value was refused:
	// not set, for IsSet (a conflict with a value that was never taken
	// would be a second error about one mistake).
	malformed []string
	// parseErr is the first malformed value Parse met on the command line.
	parseErr error
	// secrets are the values of Secret flags; dsn marks connection
	// strings. dsnLists are the values of ConnStrings flags.
	secrets  []secret
	dsnLists []*[]string
	// secretFiles are the files <ENV>_FILE variables named and the
	// secrets were read from.
	secretFiles []string
	// paths maps the address of every field of the structs registered
	// with Fields to its Go path (fields.go).
	paths map[any]string
	// fields maps config fields to flag names ("--max-batch"), examples
	// the required ones to an example value, and groups a rule over
	// several fields to their flags.
	fields, examples map[string]string
	groups           map[string][]string
	// negated are the fields of NotBool flags.
	negated map[string]bool
	// flagText is the translation of fields' paths to their flags,
	// built once by FieldError (nil until then, reset by a new flag).
	flagText func(string) string
}

type secret struct {
	p   *string
	dsn bool
}

// New returns a Binder registering on fs; environment variables are
// prefix + the flag name in upper case with dashes as underscores.
func New(fs *flag.FlagSet, prefix string) *Binder {
	return &Binder{fs: fs, prefix: prefix, lookup: os.LookupEnv, paths: map[any]string{},
		fields: map[string]string{}, examples: map[string]string{}, groups: map[string][]string{}, negated: map[string]bool{}}
}

// Listing is New for a Binder that only lists its flags' variables
// (EnvNames): it reads neither the environment nor the files the _FILE
// variables name, so the flags keep their defaults.
func Listing(fs *flag.FlagSet, prefix string) *Binder {
	b := New(fs, prefix)
	b.lookup = func(string) (string, bool) { return "", false }
	return b
}

// EnvNames returns the environment variables of the flags registered so
// far, in registration order: each flag's, and the <ENV>_FILE of a Secret,
// ConnString or ConnStrings flag.
func (b *Binder) EnvNames() []string { return slices.Clone(b.envNames) }

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
	// field is the Go path of the field the flag sets: derived from its
	// pointer (Fields), or given by To; empty when neither.
	field string
}

// To records that the flag sets field (a Go path such as
// "Kafka.Brokers"), for a flag whose value the command turns into the
// field itself (a comma-separated list into a []string): a flag bound to
// the field's own address gets its path from Fields.
func (x Binding) To(field string) Binding {
	x.b.setField(field, x.name)
	x.field = field
	return x
}

// Required gives the example value a missing value's error suggests. The
// flag must set a field (Fields or To).
func (x Binding) Required(example string) {
	if x.field == "" {
		panic("envflag: Required on flag --" + x.name + ", which sets no field")
	}
	x.b.examples[x.field] = example
}

func (b *Binder) setField(field, name string) {
	b.fields[field] = "--" + name
	b.flagText = nil
}

// Group names the flags of a rule over a group's fields ("Leader"); its
// errors list them with their values.
func (b *Binder) Group(field string, names ...string) {
	b.setField(field, names[0])
	b.groups[field] = names
}

// Flag returns the flag ("--max-batch") that sets field, if any.
func (b *Binder) Flag(field string) (string, bool) {
	f, ok := b.fields[field]
	return f, ok
}

func (b *Binder) env(name string) (string, bool) { return b.lookup(b.EnvName(name)) }

// register registers v (holding the default) as flag name, bound to p: the
// environment's value, if any, replaces the default; a malformed one is
// recorded with the same message the flag would give.
func (b *Binder) register(p any, v flag.Value, name, help string) Binding {
	if s, ok := b.env(name); ok {
		if err := v.Set(s); err != nil {
			b.errs = append(b.errs, &ValueError{Source: b.EnvName(name) + "=", Value: s, Err: err})
			b.malformed = append(b.malformed, name)
		}
	}
	b.fs.Var(&bound{Value: v, b: b, name: name}, name, fmt.Sprintf("%s (env %s)", help, b.EnvName(name)))
	b.envNames = append(b.envNames, b.EnvName(name))
	return b.binding(p, name)
}

// binding is flag name, bound to p: the flag sets p's field when p is a
// field of a struct registered with Fields.
func (b *Binder) binding(p any, name string) Binding {
	x := Binding{b: b, name: name}
	if field, ok := b.paths[p]; ok {
		return x.To(field)
	}
	return x
}

// String registers a string flag.
func (b *Binder) String(p *string, name, def, help string) Binding {
	return StringVar(b, p, name, def, help)
}

// StringVar registers a flag of a string type (poison.Policy,
// record.Format): a generic function, since methods take no type
// parameters.
func StringVar[T ~string](b *Binder, p *T, name string, def T, help string) Binding {
	*p = def
	return b.register(p, stringValue[T]{p: p, def: def}, name, help)
}

// OptionalString is String for a flag whose empty value means something
// of its own, which help must say ("empty disables"): an empty value of
// any other flag with a default is refused.
func (b *Binder) OptionalString(p *string, name, def, help string) Binding {
	*p = def
	return b.register(p, stringValue[string]{p: p, def: def, optional: true}, name, help)
}

// Secret is String for a secret: its value may also come from the file
// named by <ENV>_FILE (trailing newlines dropped), so it need not sit in
// the environment or on the command line (visible in ps).
func (b *Binder) Secret(p *string, name, def, help string) Binding {
	return b.secret(p, name, def, help, false)
}

// ConnString is Secret for a PostgreSQL connection string: Secrets lists
// it among the connection strings, whose passwords are what to hide.
func (b *Binder) ConnString(p *string, name, def, help string) Binding {
	return b.secret(p, name, def, help, true)
}

func (b *Binder) secret(p *string, name, def, help string, dsn bool) Binding {
	*p = b.secretEnv(name, def)
	b.secrets = append(b.secrets, secret{p, dsn})
	return b.registerSecret(p, secretValue{p}, name, help)
}

// secretEnv is a secret flag's value from the environment: <ENV>, or the
// file <ENV>_FILE names; def when neither is set.
func (b *Binder) secretEnv(name, def string) string {
	env := b.EnvName(name)
	if path, ok := b.lookup(env + "_FILE"); ok {
		if _, both := b.env(name); both {
			b.errs = append(b.errs, fmt.Errorf("both %s and %s_FILE are set: keep one", env, env))
		} else if v, err := secretfile.Read(path); err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s_FILE: %w (point it at a readable file holding the value)", env, err))
		} else if err := checkText(v, true); err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s_FILE: the value: %w", env, err))
		} else {
			def = v
			b.secretFiles = append(b.secretFiles, path)
		}
	} else if v, ok := b.env(name); ok {
		if err := checkText(v, true); err != nil {
			b.errs = append(b.errs, &ValueError{Source: env + "=", Value: v, Err: err, Secret: true})
		} else {
			def = v
		}
	}
	return def
}

func (b *Binder) registerSecret(p any, v flag.Value, name, help string) Binding {
	env := b.EnvName(name)
	b.fs.Var(&bound{Value: v, b: b, name: name, secret: true}, name, fmt.Sprintf("%s (env %s or %s_FILE)", help, env, env))
	b.envNames = append(b.envNames, env, env+"_FILE")
	return b.binding(p, name)
}

// SecretFiles returns the files that <ENV>_FILE variables named, from
// which secret flags took their values (for a warning about their
// permissions: internal/secretfile.Exposed).
func (b *Binder) SecretFiles() []string { return b.secretFiles }

// Secrets returns the current values of the Secret flags (plain) and of
// the ConnString flags (dsns), for a redacting writer.
func (b *Binder) Secrets() (plain, dsns []string) {
	for _, s := range b.secrets {
		if s.dsn {
			dsns = append(dsns, *s.p)
		} else {
			plain = append(plain, *s.p)
		}
	}
	for _, l := range b.dsnLists {
		dsns = append(dsns, *l...)
	}
	return plain, dsns
}

// Duration registers a time.Duration flag; it also takes days ("7d").
func (b *Binder) Duration(p *time.Duration, name string, def time.Duration, help string) Binding {
	*p = def
	return b.register(p, durationValue{p}, name, help)
}

// Int registers an int flag.
func (b *Binder) Int(p *int, name string, def int, help string) Binding {
	*p = def
	return b.register(p, intValue[int]{p}, name, help)
}

// Int64 registers an int64 flag.
func (b *Binder) Int64(p *int64, name string, def int64, help string) Binding {
	*p = def
	return b.register(p, intValue[int64]{p}, name, help)
}

// Size registers a byte count flag: a plain integer or a value with a
// unit (16MiB, 50GB).
func (b *Binder) Size(p *int64, name string, def int64, help string) Binding {
	*p = def
	return b.register(p, sizeValue[int64]{p}, name, help)
}

// IntSize is Size for an int.
func (b *Binder) IntSize(p *int, name string, def int, help string) Binding {
	*p = def
	return b.register(p, sizeValue[int]{p}, name, help)
}

// Bool registers a bool flag.
func (b *Binder) Bool(p *bool, name string, def bool, help string) Binding {
	*p = def
	return b.register(p, boolValue{p}, name, help)
}

// NotBool registers a bool flag that sets *p to its negation: a flag that
// turns on what a "No..." field turns off (--failover-slot and
// NoFailoverSlot). def is the flag's default. Text naming the field reads
// "--failover-slot=false" (FlagNames).
func (b *Binder) NotBool(p *bool, name string, def bool, help string) Binding {
	*p = !def
	x := b.register(p, notBoolValue{p}, name, help)
	if x.field != "" {
		b.negated[x.field] = true
	}
	return x
}

// FieldValue returns the value of the flag bound to field (To), as the
// flag prints it, and whether a flag is bound to it.
func (b *Binder) FieldValue(field string) (string, bool) {
	name, ok := b.fields[field]
	if !ok {
		return "", false
	}
	return b.fs.Lookup(strings.TrimPrefix(name, "--")).Value.String(), true
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
	// Publish.MaxBatchBytes").
	if b.flagText == nil {
		b.flagText = FlagText(b.FlagNames())
	}
	return fmt.Errorf("%s", b.flagText(name+detail))
}
