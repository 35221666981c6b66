package main

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/relay"
)

// envPrefix prefixes the environment fallback of every flag.
const envPrefix = "OUTBOX_RELAY_"

// envName maps a flag name to its environment variable.
func envName(flagName string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagBinder registers flags whose defaults come from the environment, and
// remembers malformed environment values to report them at validation.
type flagBinder struct {
	fs   *flag.FlagSet
	errs []error
	// fields maps the config fields (relay.Config's, kafkaconn.Config's)
	// of the bound flags to the flags' names ("--max-batch"), examples
	// the required ones to an example value, and groups a rule over
	// several fields to their flags: validation errors are printed in
	// the flags' terms.
	fields, examples map[string]string
	groups           map[string][]string
}

// binding is a flag just registered.
type binding struct {
	b    *flagBinder
	name string
}

// to records that the flag sets field (a Go path such as
// "Publish.MaxBatch").
func (x binding) to(field string) binding {
	if x.b.fields == nil {
		x.b.fields, x.b.examples, x.b.groups = map[string]string{}, map[string]string{}, map[string][]string{}
	}
	x.b.fields[field] = "--" + x.name
	return x
}

// required gives the example a missing value's error suggests.
func (x binding) required(field, example string) {
	x.to(field).b.examples[field] = example
}

// group names the flags of a rule over a group's fields ("Leader"); its
// errors list them with their values.
func (b *flagBinder) group(field string, names ...string) {
	binding{b, names[0]}.to(field).b.groups[field] = names
}

func (b *flagBinder) env(name string) (string, bool) { return os.LookupEnv(envName(name)) }

func (b *flagBinder) usage(name, help string) string {
	return fmt.Sprintf("%s (env %s)", help, envName(name))
}

// envDefault is def, or the environment's value for the flag name parsed
// by parse; a malformed value is reported at validation ("is not what").
func envDefault[T any](b *flagBinder, name string, def T, parse func(string) (T, error), what string) T {
	if v, ok := b.env(name); ok {
		t, err := parse(v)
		if err == nil {
			return t
		}
		b.errs = append(b.errs, fmt.Errorf("%s=%q is not %s", envName(name), v, what))
	}
	return def
}

func (b *flagBinder) str(p *string, name, def, help string) binding {
	if v, ok := b.env(name); ok {
		def = v
	}
	b.fs.StringVar(p, name, def, b.usage(name, help))
	return binding{b, name}
}

// secret is str for a secret: its value may also come from the file
// named by <ENV>_FILE (trailing newlines dropped), so it need not sit in
// the environment or on the command line (visible in ps).
func (b *flagBinder) secret(p *string, name, def, help string) binding {
	env := envName(name)
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
	return binding{b, name}
}

func (b *flagBinder) dur(p *time.Duration, name string, def time.Duration, help string) binding {
	def = envDefault(b, name, def, time.ParseDuration, "a duration: use a value like 500ms, 10s or 1m")
	b.fs.DurationVar(p, name, def, b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) int(p *int, name string, def int, help string) binding {
	b.fs.IntVar(p, name, envDefault(b, name, def, strconv.Atoi, "an integer"), b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) int64(p *int64, name string, def int64, help string) binding {
	parse := func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) }
	b.fs.Int64Var(p, name, envDefault(b, name, def, parse, "an integer"), b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) bool(p *bool, name string, def bool, help string) binding {
	b.fs.BoolVar(p, name, envDefault(b, name, def, strconv.ParseBool, "a boolean: use true or false"), b.usage(name, help))
	return binding{b, name}
}

// flagError prints a relay.FieldError in the terms of this command's flags;
// nil for a field the command has no flag for (it keeps its default).
func (b *flagBinder) flagError(fe *relay.FieldError) error {
	name, ok := b.fields[fe.Field]
	if !ok {
		return nil
	}
	if ex, ok := b.examples[fe.Field]; ok && errors.Is(fe.Err, relay.ErrRequired) {
		return fmt.Errorf("%s is required: set %s=%s", name, envName(strings.TrimPrefix(name, "--")), ex)
	}
	if names, ok := b.groups[fe.Field]; ok {
		var flags []string
		for _, n := range names {
			flags = append(flags, "--"+n+" "+b.fs.Lookup(n).Value.String())
		}
		name = strings.Join(flags, ", ")
	}
	// Err may name other fields too ("use at least Publish.MaxBatchBytes"):
	// longest first, so that Publish.MaxBatchBytes is not read as
	// Publish.MaxBatch.
	fields := slices.SortedFunc(maps.Keys(b.fields), func(x, y string) int { return len(y) - len(x) })
	var pairs []string
	for _, f := range fields {
		if strings.Contains(f, ".") {
			pairs = append(pairs, f, b.fields[f])
		}
	}
	return errors.New(strings.NewReplacer(pairs...).Replace(name + strings.TrimPrefix(fe.Error(), fe.Field)))
}
