package envflag

import (
	"strings"

	"github.com/alecthomas/kong"
)

// HelpSuffix is what --help adds to the help of flag f (nil: a
// positional argument): its variables and, for a secret the environment
// or its file sets, "(set)", never the value: --help goes to terminals,
// CI logs and bug reports.
func (e *Env) HelpSuffix(f *kong.Flag) string {
	if f == nil || !Configures(f) {
		return ""
	}
	names := e.Names(f)
	s := " (env " + strings.Join(names, " or ") + ")"
	if _, secret := FlagKind(f); secret {
		for _, n := range names {
			if _, ok := e.lookup(n); ok {
				return s + " (set)"
			}
		}
	}
	return s
}
