package envflag

import (
	"errors"
	"strconv"
	"time"
)

// The flag values the Binder registers. They replace the flag package's
// own so that a malformed value gets the same message whether it came from
// the command line or the environment (the flag package reports its own
// integers and booleans as a bare "parse error"), and so that durations
// take days and byte counts take units.

// typed is a flag value that names its type in the usage text ("-name
// duration"); the flag package only does so for its own types.
type typed interface{ Type() string }

// stringValue is a flag of a string type: string, or one defined on it
// (poison.Policy), whose validation is its configuration's.
type stringValue[T ~string] struct{ p *T }

func (v stringValue[T]) Set(s string) error { *v.p = T(s); return nil }
func (v stringValue[T]) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
func (v stringValue[T]) Type() string { return "string" }

// quoted marks the values whose default the usage quotes.
func (v stringValue[T]) quoted() {}

type boolValue struct{ p *bool }

func (v boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("not a boolean: use true or false")
	}
	*v.p = b
	return nil
}
func (v boolValue) String() string   { return strconv.FormatBool(v.p != nil && *v.p) }
func (v boolValue) IsBoolFlag() bool { return true }

// notBoolValue is a bool flag that sets the negation of its value (NotBool).
type notBoolValue struct{ p *bool }

func (v notBoolValue) Set(s string) error {
	var b bool
	if err := (boolValue{&b}).Set(s); err != nil {
		return err
	}
	*v.p = !b
	return nil
}
func (v notBoolValue) String() string   { return strconv.FormatBool(v.p != nil && !*v.p) }
func (v notBoolValue) IsBoolFlag() bool { return true }

type intValue[T int | int64] struct{ p *T }

func (v intValue[T]) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || int64(T(n)) != n {
		return errors.New("not an integer")
	}
	*v.p = T(n)
	return nil
}
func (v intValue[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatInt(int64(*v.p), 10)
}
func (v intValue[T]) Type() string { return "int" }

type durationValue struct{ p *time.Duration }

func (v durationValue) Set(s string) error {
	d, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*v.p = d
	return nil
}
func (v durationValue) String() string {
	if v.p == nil {
		return "0s"
	}
	return v.p.String()
}
func (v durationValue) Type() string { return "duration" }

type sizeValue[T int | int64] struct{ p *T }

func (v sizeValue[T]) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	if int64(T(n)) != n {
		return errors.New(errSize)
	}
	*v.p = T(n)
	return nil
}
func (v sizeValue[T]) String() string {
	if v.p == nil {
		return "0"
	}
	return FormatSize(int64(*v.p))
}
func (v sizeValue[T]) Type() string { return "size" }
