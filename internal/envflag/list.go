package envflag

import (
	"flag"
	"slices"
	"strings"
)

// ConnStrings registers a repeatable flag of PostgreSQL connection strings
// (doctor's --standby-url): each use adds one, and a value may list
// several separated by commas, so each must name a single host. The
// environment (or the file <ENV>_FILE names) holds the comma-separated
// list; a command line that uses the flag replaces it, as for any flag.
// Like ConnString's, their passwords are among Secrets.
func (b *Binder) ConnStrings(p *[]string, name, help string) Binding {
	*p = splitList(b.secretEnv(name, ""))
	b.dsnLists = append(b.dsnLists, p)
	return b.registerSecret(p, &listValue{p: p}, name, help)
}

// IsSet reports whether flag name was given, on the command line or in the
// environment, rather than left at its default: for a setting that acts
// on existing state only when asked to (migrate --failover-slot).
func (b *Binder) IsSet(name string) bool {
	if slices.Contains(b.malformed, name) {
		return false
	}
	env := b.EnvName(name)
	if _, ok := b.lookup(env); ok {
		return true
	}
	if _, ok := b.lookup(env + "_FILE"); ok {
		return true
	}
	set := false
	b.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// listValue is a repeatable flag's values. The first command-line value
// replaces those from the environment; later ones add to it.
type listValue struct {
	p       *[]string
	cmdline bool
}

func (v *listValue) Set(s string) error {
	if err := checkText(s, true); err != nil {
		return err
	}
	if !v.cmdline {
		*v.p, v.cmdline = nil, true
	}
	*v.p = append(*v.p, splitList(s)...)
	return nil
}

func (v *listValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v *listValue) Type() string { return "string" }

// splitList splits a comma-separated list, dropping empty entries.
func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
