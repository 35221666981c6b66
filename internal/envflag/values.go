package envflag

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds every flag of a kind shares, checked where the value is parsed,
// for the command line and the environment alike. A flag's own range (a
// positive interval, a port) is its configuration's Validate; these only
// keep out what no flag means, so a typo or an attack cannot reach the
// code that would allocate, sleep or loop on it.
const (
	// maxText is the longest string value: longer than any name, address,
	// path or template the flags take.
	maxText = 4096
	// maxSecretText is the longest secret or connection string: OAuth
	// client secrets and key=value connection strings run longer.
	maxSecretText = 16 << 10
	// maxInt is the largest integer magnitude: counts, partitions and
	// batch sizes; Kafka's own are int32.
	maxInt = math.MaxInt32
	// maxDuration is the longest duration: ten years is longer than any
	// interval, timeout or retention a relay has.
	maxDuration = 3650 * 24 * time.Hour
	// maxSize is the largest byte count: 1 PiB.
	maxSize = 1 << 50
)

// checkText refuses a string value no flag means: invalid UTF-8, a control
// character (a line break in a name forges log lines, a NUL cannot reach
// PostgreSQL), or a value longer than maxText. Secrets and connection
// strings may hold tabs and line breaks (a key=value connection string
// written over lines in a file) and be up to maxSecretText long.
func checkText(s string, secret bool) error {
	limit := maxText
	if secret {
		limit = maxSecretText
	}
	if len(s) > limit {
		return fmt.Errorf("too long: %d bytes, at most %d", len(s), limit)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) && !(secret && (r == '\t' || r == '\n' || r == '\r')) {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}

// The flag values the Binder registers. They replace the flag package's
// own so that a malformed value gets the same message whether it came from
// the command line or the environment (the flag package reports its own
// integers and booleans as a bare "parse error"), and so that durations
// take days and byte counts take units.

// typed is a flag value that names its type in the usage text ("-name
// duration"); the flag package only does so for its own types.
type typed interface{ Type() string }

// stringValue is a flag of a string type: string, or one defined on it
// (poison.Policy), whose validation is its configuration's. A flag with
// a default refuses an empty value, which would otherwise fall back to
// the default or to nothing silently, unless the empty value has a
// meaning of its own (OptionalString).
type stringValue[T ~string] struct {
	p        *T
	def      T
	optional bool
}

func (v stringValue[T]) Set(s string) error {
	if err := checkText(s, false); err != nil {
		return err
	}
	if s == "" && v.def != "" && !v.optional {
		return fmt.Errorf("empty: leave the flag out for its default, %q", string(v.def))
	}
	*v.p = T(s)
	return nil
}
func (v stringValue[T]) String() string {
	if v.p == nil {
		return ""
	}
	return string(*v.p)
}
func (v stringValue[T]) Type() string { return "string" }

// quoted marks the values whose default the usage quotes.
func (v stringValue[T]) quoted() {}

// secretValue is a Secret or ConnString flag's value: checkText's
// secret rules, and never quoted in the usage (it shows "(set)").
type secretValue struct{ p *string }

func (v secretValue) Set(s string) error {
	if err := checkText(s, true); err != nil {
		return err
	}
	*v.p = s
	return nil
}
func (v secretValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}
func (v secretValue) Type() string { return "string" }

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
	if n > maxInt || n < -maxInt {
		return fmt.Errorf("out of range: at most %d", maxInt)
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
	switch {
	case d < 0:
		// No flag gives a negative duration a meaning; "0 disables"
		// is how a flag turns something off.
		return errors.New("negative: use 0 or more")
	case d > maxDuration:
		return errors.New("out of range: at most 3650d")
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
	switch {
	case n < 0:
		return errors.New("negative: use 0 or more")
	case n > maxSize:
		return errors.New("out of range: at most 1PiB")
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
