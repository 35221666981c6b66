package envflag

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// PrintDefaults prints the flags as flag.PrintDefaults does, naming each
// Binder value's type ("-max-inflight-bytes size") where the flag package
// would print "value" for a type it does not know. A secret flag shows
// "(set)" when the environment or its file gave it a value, never the
// value: --help goes to terminals, CI logs and bug reports.
func (b *Binder) PrintDefaults(w io.Writer) {
	b.fs.VisitAll(func(f *flag.Flag) {
		var s strings.Builder
		fmt.Fprintf(&s, "  -%s", f.Name)
		name, usage := flag.UnquoteUsage(f)
		if bv, ok := f.Value.(*bound); ok && name == "value" {
			if t, ok := bv.Value.(typed); ok {
				name = t.Type()
			}
		}
		if name != "" {
			s.WriteString(" " + name)
		}
		s.WriteString("\n    \t")
		s.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
		if bv, ok := f.Value.(*bound); ok && bv.secret {
			if f.DefValue != "" && f.DefValue != "[]" {
				s.WriteString(" (set)")
			}
		} else if def := f.DefValue; !zero(f, def) {
			if _, str := unbound(f.Value).(interface{ quoted() }); str {
				fmt.Fprintf(&s, " (default %q)", def)
			} else {
				fmt.Fprintf(&s, " (default %v)", def)
			}
		}
		fmt.Fprintln(w, s.String())
	})
}

func unbound(v flag.Value) flag.Value {
	if bv, ok := v.(*bound); ok {
		return bv.Value
	}
	return v
}

// zero reports whether def is the zero value of f's type, which the usage
// does not print.
func zero(f *flag.Flag, def string) bool {
	switch unbound(f.Value).(type) {
	case *listValue:
		return true // connection strings: never printed
	case interface{ quoted() }:
		return def == ""
	case boolValue, notBoolValue:
		return def == "false"
	case durationValue:
		return def == "0s"
	}
	return def == "0"
}

// Kind names f's value type as the usage does ("bool", "int", "duration",
// "size", "string"; "list" for ConnStrings), and whether its value is a
// secret. Tests generate inputs per kind, so a new flag is covered by
// them without being listed.
func Kind(f *flag.Flag) (kind string, secret bool) {
	bv, _ := f.Value.(*bound)
	if bv != nil {
		secret = bv.secret
	}
	switch v := unbound(f.Value).(type) {
	case *listValue:
		return "list", secret
	case boolValue, notBoolValue:
		return "bool", secret
	case typed:
		return v.Type(), secret
	}
	return "string", secret
}
