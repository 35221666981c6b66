package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
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
	// fields maps the relay.Config fields of the bound flags to their
	// names ("--max-batch"), and examples the required ones to an example
	// value: relay's FieldErrors are printed in the flags' terms.
	fields, examples map[string]string
	groups           map[string][]string
}

// binding is a flag just registered.
type binding struct {
	b    *flagBinder
	name string
}

// to records that the flag sets relay.Config's field (a Go path such as
// "Publish.MaxBatch").
func (x binding) to(field string) binding {
	if x.b.fields == nil {
		x.b.fields, x.b.examples = map[string]string{}, map[string]string{}
	}
	x.b.fields[field] = "--" + x.name
	return x
}

// group names the flags of a rule over a group's fields ("Leader"); its
// errors list them with their values.
func (b *flagBinder) group(field string, names ...string) {
	binding{b, names[0]}.to(field)
	b.groups = map[string][]string{field: names}
}

// required gives the example a missing value's error suggests.
func (x binding) required(field, example string) {
	x.to(field)
	x.b.examples[field] = example
}

func (b *flagBinder) env(name string) (string, bool) { return os.LookupEnv(envName(name)) }

func (b *flagBinder) usage(name, help string) string {
	return fmt.Sprintf("%s (env %s)", help, envName(name))
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
	if v, ok := b.env(name); ok {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not a duration: use a value like 500ms, 10s or 1m", envName(name), v))
		} else {
			def = d
		}
	}
	b.fs.DurationVar(p, name, def, b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) int(p *int, name string, def int, help string) binding {
	if v, ok := b.env(name); ok {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not an integer", envName(name), v))
		} else {
			def = n
		}
	}
	b.fs.IntVar(p, name, def, b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) int64(p *int64, name string, def int64, help string) binding {
	if v, ok := b.env(name); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not an integer", envName(name), v))
		} else {
			def = n
		}
	}
	b.fs.Int64Var(p, name, def, b.usage(name, help))
	return binding{b, name}
}

func (b *flagBinder) bool(p *bool, name string, def bool, help string) binding {
	if v, ok := b.env(name); ok {
		t, err := strconv.ParseBool(v)
		if err != nil {
			b.errs = append(b.errs, fmt.Errorf("%s=%q is not a boolean: use true or false", envName(name), v))
		} else {
			def = t
		}
	}
	b.fs.BoolVar(p, name, def, b.usage(name, help))
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
	// Err may name other fields too: "use at least Publish.MaxBatchBytes".
	var pairs []string
	for f, n := range b.fields {
		if strings.Contains(f, ".") {
			pairs = append(pairs, f, n)
		}
	}
	sort.Sort(longestFirst(pairs)) // Publish.MaxBatchBytes before Publish.MaxBatch
	return &renamedError{strings.NewReplacer(pairs...).Replace(name + strings.TrimPrefix(fe.Error(), fe.Field)), fe}
}

// longestFirst orders old, new pairs by the length of old, longest first.
type longestFirst []string

func (p longestFirst) Len() int           { return len(p) / 2 }
func (p longestFirst) Less(i, j int) bool { return len(p[2*i]) > len(p[2*j]) }
func (p longestFirst) Swap(i, j int) {
	p[2*i], p[2*j] = p[2*j], p[2*i]
	p[2*i+1], p[2*j+1] = p[2*j+1], p[2*i+1]
}

// renamedError is a relay.FieldError with flag names.
type renamedError struct {
	msg string
	fe  *relay.FieldError
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.fe }
