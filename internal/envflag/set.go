package envflag

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// Set is a parsed command's flags, by the configuration fields they set:
// what a command needs after kong parsed its line, to fill its
// configuration (Fill), to tell a flag given from one left at its default
// (IsSet), and to name a field by its flag in an error (FieldError,
// Names).
//
// A flag's field comes from its tags: to is where the value goes, field
// the name library errors use when it is not to's (relay.Config fields
// are named without "Relay.", kafkaconn.Config's with "kafkaconn.").
type Set struct {
	flags   []*kong.Flag
	byField map[string]*kong.Flag
	rules   map[string][]*kong.Flag
	cmdline map[string]bool
	env     *Env
}

// NewSet returns the flags of the command ctx selected, as ctx parsed
// them, with env their environment fallback.
func NewSet(ctx *kong.Context, env *Env) *Set {
	s := &Set{byField: map[string]*kong.Flag{}, rules: map[string][]*kong.Flag{}, cmdline: map[string]bool{}, env: env}
	for _, p := range ctx.Path {
		if p.Flag != nil && !p.Resolved {
			s.cmdline[p.Flag.Name] = true
		}
	}
	for _, f := range ctx.Flags() {
		if !Configures(f) {
			continue
		}
		s.flags = append(s.flags, f)
		if field := Field(f); field != "" {
			s.byField[field] = f
		}
		if r := f.Tag.Get("rule"); r != "" {
			s.rules[r] = append(s.rules[r], f)
		}
	}
	return s
}

// Field is the configuration field flag f sets, as library errors name
// it; empty for a flag that sets none.
func Field(f *kong.Flag) string {
	field, to := f.Tag.Get("field"), f.Tag.Get("to")
	if field != "" {
		return field
	}
	if rest, ok := strings.CutPrefix(to, "Relay."); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(to, "KafkaConn."); ok {
		return "kafkaconn." + rest
	}
	return to
}

// OnCommandLine reports whether flag name was given on the command line
// (not from the environment).
func (s *Set) OnCommandLine(name string) bool { return s.cmdline[name] }

// Flags are the command's flags.
func (s *Set) Flags() []*kong.Flag { return s.flags }

// IsSet reports whether flag name was given, on the command line or in the
// environment, rather than left at its default.
func (s *Set) IsSet(name string) bool { return s.cmdline[name] || s.env.IsSet(name) }

// Fill sets the field at each flag's to path in root (a pointer to a
// struct) to the flag's value: negated for a negate flag, converted to the
// field's type (a flag's string into a poison.Policy). A path root lacks
// is left alone: it is another root's (config's, or the command's own
// options').
func (s *Set) Fill(root any) {
	r := reflect.ValueOf(root).Elem()
	for _, f := range s.flags {
		to := f.Tag.Get("to")
		if to == "" {
			continue
		}
		dst := r
		for _, name := range strings.Split(to, ".") {
			if dst = dst.FieldByName(name); !dst.IsValid() {
				break // not root's: another root's (a command's own options)
			}
		}
		if !dst.IsValid() {
			continue
		}
		v := f.Target
		if f.Tag.Has("negate") {
			v = reflect.ValueOf(!v.Bool())
		}
		dst.Set(v.Convert(dst.Type()))
	}
}

// Flag is the flag ("--max-batch") that sets field, if the command has
// one.
func (s *Set) Flag(field string) (string, bool) {
	if f, ok := s.byField[field]; ok {
		return "--" + f.Name, true
	}
	return "", false
}

// Value is the value of the flag that sets field, as --help prints it,
// and whether the command has one.
func (s *Set) Value(field string) (string, bool) {
	f, ok := s.byField[field]
	if !ok {
		return "", false
	}
	return Format(f, f.Target), true
}

// Format is v, a value of flag f, as --help prints it: sizes with
// units, durations as Go prints them.
func Format(f *kong.Flag, v reflect.Value) string {
	kind, _ := FlagKind(f)
	switch kind {
	case KindSize:
		return FormatSize(v.Int())
	case KindDuration:
		return time.Duration(v.Int()).String()
	case KindList:
		return strings.Join(v.Interface().([]string), ",")
	}
	return fmt.Sprint(v.Interface())
}

// Names maps each field to its flag, for FlagText: a negate flag's field
// reads "--failover-slot=false" (the field turns on what the flag's false
// does).
func (s *Set) Names() map[string]string { return Names(s.flags) }

// Names maps the field each of flags sets to the flag, as Set.Names.
func Names(flags []*kong.Flag) map[string]string {
	names := map[string]string{}
	for _, f := range flags {
		field := Field(f)
		if field == "" {
			continue
		}
		names[field] = "--" + f.Name
		if f.Tag.Has("negate") {
			names[field] += "=false"
		}
	}
	return names
}

// FieldError renders an error about field in flag terms: detail is the
// error's text after the field's name (": use 1..100000"), missing says a
// required value is empty (the error then gives the flag's example, as
// its environment variable), and a rule's error lists its flags with
// their values. nil for a field no flag of the command sets: it keeps its
// default. text names the other fields detail mentions.
func (s *Set) FieldError(field string, missing bool, detail string, text func(string) string) error {
	if fs, ok := s.rules[field]; ok {
		// Declared from the most frequent to the bound: listed the other
		// way round, the bound first.
		fs = slices.Clone(fs)
		slices.Reverse(fs)
		var parts []string
		for _, f := range fs {
			parts = append(parts, "--"+f.Name+" "+Format(f, f.Target))
		}
		return fmt.Errorf("%s", text(strings.Join(parts, ", ")+detail))
	}
	f, ok := s.byField[field]
	if !ok {
		return nil
	}
	if ex := f.Tag.Get("example"); ex != "" && missing {
		return fmt.Errorf("--%s is required: set %s=%s", f.Name, s.env.Name(f.Name), ex)
	}
	return fmt.Errorf("%s", text("--"+f.Name+detail))
}

// Quoted reports whether the flag of field shows its value quoted (a
// string).
func (s *Set) Quoted(field string) bool {
	f, ok := s.byField[field]
	if !ok {
		return false
	}
	kind, _ := FlagKind(f)
	return kind == KindString
}

// Secrets are the values that must never be printed: the secret flags'
// (plain) and the connection strings, whose passwords are masked (dsns).
func (s *Set) Secrets() (plain, dsns []string) {
	for _, f := range s.flags {
		if !f.Tag.Has("secret") {
			continue
		}
		var vals []string
		if f.Target.Kind() == reflect.Slice {
			vals = f.Target.Interface().([]string)
		} else {
			vals = []string{f.Target.String()}
		}
		for _, v := range vals {
			if f.Tag.Get("secret") == "dsn" {
				dsns = append(dsns, v)
			} else if v != "" {
				plain = append(plain, v)
			}
		}
	}
	return plain, dsns
}

// EnvErrs are the command's malformed variables (Env.Errs).
func (s *Set) EnvErrs() []error { return s.env.Errs(s.flags) }

// SecretFiles are the files the environment's secrets came from.
func (s *Set) SecretFiles() []string { return s.env.SecretFiles() }

// EnvNames are the variables of the command's flags.
func (s *Set) EnvNames() []string {
	var names []string
	for _, f := range s.flags {
		names = append(names, s.env.Names(f)...)
	}
	return names
}
