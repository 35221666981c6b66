package envflag

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/alecthomas/kong"
)

// PrintFlags prints flags as --help lists them, sorted by name: each
// with its kind ("--max-inflight-bytes size"), its help, its variables
// and its default. A secret flag shows "(set)" when the environment or
// its file gives it a value, never the value: --help goes to terminals,
// CI logs and bug reports.
func PrintFlags(w io.Writer, flags []*kong.Flag, env *Env) {
	flags = slices.Clone(flags)
	slices.SortFunc(flags, func(a, b *kong.Flag) int { return strings.Compare(a.Name, b.Name) })
	for _, f := range flags {
		if !Configures(f) {
			continue
		}
		kind, secret := FlagKind(f)
		var s strings.Builder
		fmt.Fprintf(&s, "  --%s", f.Name)
		switch kind {
		case KindBool:
		case KindList:
			s.WriteString(" string")
		default:
			s.WriteString(" " + string(kind))
		}
		s.WriteString("\n    \t" + strings.ReplaceAll(f.Help, "\n", "\n    \t"))
		names := env.Names(f)
		fmt.Fprintf(&s, " (env %s)", strings.Join(names, " or "))
		switch {
		case secret:
			for _, n := range names {
				if _, ok := env.lookup(n); ok {
					s.WriteString(" (set)")
					break
				}
			}
		case f.HasDefault && !zero(kind, f.Default):
			if kind == KindString {
				fmt.Fprintf(&s, " (default %q)", f.Default)
			} else {
				fmt.Fprintf(&s, " (default %s)", f.Default)
			}
		}
		fmt.Fprintln(w, s.String())
	}
}

// zero reports whether def is the zero value of its kind, which --help
// does not print.
func zero(kind Kind, def string) bool {
	switch kind {
	case KindString, KindList:
		return def == ""
	case KindBool:
		return def == "false"
	case KindDuration:
		return def == "0s" || def == "0"
	}
	return def == "0"
}
