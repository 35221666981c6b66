package envflag

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kong"
)

// Kind is a flag's kind of value, from its Go type and tags: the bounds
// it shares with every flag of the kind (checkText, maxInt, maxDuration,
// maxSize), what --help calls it, and the inputs tests generate for it.
type Kind string

// The kinds.
const (
	KindString   Kind = "string"
	KindBool     Kind = "bool"
	KindInt      Kind = "int"
	KindDuration Kind = "duration"
	KindSize     Kind = "size"
	// KindList is a repeatable, comma-separated list of connection
	// strings (doctor's --standby-url).
	KindList Kind = "list"
)

// FlagKind is f's kind and whether its value is secret (tag secret: a
// password, or a connection string that may hold one).
func FlagKind(f *kong.Flag) (Kind, bool) {
	secret := f.Tag.Has("secret")
	switch {
	case f.Tag.Type == "size":
		return KindSize, secret
	case f.Target.Type() == reflect.TypeFor[time.Duration]():
		return KindDuration, secret
	case f.Target.Kind() == reflect.Bool:
		return KindBool, secret
	case f.Target.Kind() == reflect.Int, f.Target.Kind() == reflect.Int64:
		return KindInt, secret
	case f.Target.Kind() == reflect.Slice:
		return KindList, secret
	}
	return KindString, secret
}

// Options are the kong options of the bounded kinds: every flag's value,
// from the command line or the environment (Env), is parsed here, so a
// malformed one reads the same from either source.
func Options() []kong.Option {
	m := kong.MapperFunc(decode)
	return []kong.Option{
		kong.TypeMapper(reflect.TypeFor[string](), m),
		kong.TypeMapper(reflect.TypeFor[int](), m),
		kong.TypeMapper(reflect.TypeFor[int64](), m),
		kong.TypeMapper(reflect.TypeFor[time.Duration](), m),
		kong.TypeMapper(reflect.TypeFor[[]string](), m),
		kong.TypeMapper(reflect.TypeFor[bool](), boolMapper{}),
		kong.NamedMapper("size", m),
		// A value may start with a hyphen: --topic-replication-factor -1.
		kong.WithHyphenPrefixedParameters(true),
	}
}

// flagOf is the flag a decode context parses.
func flagOf(ctx *kong.DecodeContext) *kong.Flag {
	return &kong.Flag{Value: ctx.Value}
}

// decode is the mapper of every kind but bool.
func decode(ctx *kong.DecodeContext, target reflect.Value) error {
	f := flagOf(ctx)
	t := ctx.Scan.Pop()
	switch t.Type {
	case kong.EOLToken, kong.FlagToken, kong.ShortFlagToken, kong.ShortFlagTailToken:
		return fmt.Errorf("flag needs a value: --%s", f.Name)
	}
	s := fmt.Sprint(t.Value)
	v, err := Parse(f, s)
	if err != nil {
		_, secret := FlagKind(f)
		return &ValueError{Source: "--" + f.Name + " ", Value: s, Err: err, Secret: secret}
	}
	if target.Kind() == reflect.Slice {
		target.Set(reflect.AppendSlice(target, v))
		return nil
	}
	target.Set(v.Convert(target.Type()))
	return nil
}

// Parse parses s as the value of f: its kind's syntax and bounds, and, for
// a string flag with a default, no empty value unless the flag is
// optional (an empty value would otherwise fall back to the default, or
// to nothing, silently).
func Parse(f *kong.Flag, s string) (reflect.Value, error) {
	kind, secret := FlagKind(f)
	switch kind {
	case KindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return reflect.Value{}, errors.New("not a boolean: use true or false")
		}
		return reflect.ValueOf(b), nil
	case KindInt:
		n, err := strconv.ParseInt(s, 10, 64)
		switch {
		case err != nil:
			return reflect.Value{}, errors.New("not an integer")
		case n > maxInt || n < -maxInt:
			return reflect.Value{}, fmt.Errorf("out of range: at most %d", maxInt)
		}
		return reflect.ValueOf(n), nil
	case KindDuration:
		d, err := ParseDuration(s)
		switch {
		case err != nil:
			return reflect.Value{}, err
		case d < 0:
			// No flag gives a negative duration a meaning; "0
			// disables" is how a flag turns something off.
			return reflect.Value{}, errors.New("negative: use 0 or more")
		case d > maxDuration:
			return reflect.Value{}, errors.New("out of range: at most 3650d")
		}
		return reflect.ValueOf(d), nil
	case KindSize:
		n, err := ParseSize(s)
		switch {
		case err != nil:
			return reflect.Value{}, err
		case n < 0:
			return reflect.Value{}, errors.New("negative: use 0 or more")
		case n > maxSize:
			return reflect.Value{}, errors.New("out of range: at most 1PiB")
		}
		return reflect.ValueOf(n), nil
	case KindList:
		if err := checkText(s, true); err != nil {
			return reflect.Value{}, err
		}
		return reflect.ValueOf(splitList(s)), nil
	}
	if err := checkText(s, secret); err != nil {
		return reflect.Value{}, err
	}
	if s == "" && f.Default != "" && !f.Tag.Has("optional") && !secret {
		return reflect.Value{}, fmt.Errorf("empty: leave the flag out for its default, %q", f.Default)
	}
	return reflect.ValueOf(s), nil
}

// boolMapper is the bool kind's mapper: --flag alone is true, and
// --flag=false is how a flag with a true default is turned off.
type boolMapper struct{}

func (boolMapper) IsBool() bool { return true }

func (boolMapper) Decode(ctx *kong.DecodeContext, target reflect.Value) error {
	if t := ctx.Scan.Peek(); t.Type != kong.FlagValueToken {
		target.SetBool(true)
		return nil
	}
	s := fmt.Sprint(ctx.Scan.Pop().Value)
	f := flagOf(ctx)
	v, err := Parse(f, s)
	if err != nil {
		return &ValueError{Source: "--" + f.Name + "=", Value: s, Err: err}
	}
	target.SetBool(v.Bool())
	return nil
}

// splitList splits a comma-separated list, dropping empty elements.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
