package envflag

import (
	"reflect"
	"strings"

	"github.com/alecthomas/kong"
)

// Configures reports whether flag f is a configuration flag: not kong's
// --help or --version, which configure nothing and have no environment
// variable.
func Configures(f *kong.Flag) bool { return f.Name != "help" && f.Name != "version" }

// Flags are the flags of a command's node (its groups' and its own),
// without --help and --version.
func Flags(node *kong.Node) []*kong.Flag {
	var out []*kong.Flag
	for _, group := range node.AllFlags(false) {
		for _, f := range group {
			if Configures(f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// Defaults is a kong.PostBuild hook that gives each flag without a
// default tag whose to tag starts with prefix the value at the rest of
// that path in def: the binary's flags take the library's defaults
// (relay.DefaultConfig), so both start from the same values and --help
// shows them.
func Defaults(prefix string, def any) kong.Option {
	d := reflect.ValueOf(def)
	return kong.PostBuild(func(k *kong.Kong) error {
		return kong.Visit(k.Model, func(n kong.Visitable, next kong.Next) error {
			f, ok := n.(*kong.Flag)
			if !ok || f.HasDefault {
				return next(nil)
			}
			path, ok := strings.CutPrefix(f.Tag.Get("to"), prefix)
			if !ok {
				return next(nil)
			}
			v := d
			for _, name := range strings.Split(path, ".") {
				v = v.FieldByName(name)
			}
			if f.Tag.Has("negate") {
				v = reflect.ValueOf(!v.Bool())
			}
			f.HasDefault, f.Default = true, Format(f, v)
			f.Tag.Default = f.Default
			return next(nil)
		})
	})
}

// Normalize accepts the single-dash long flags of Go's flag package
// (-slot x), which the binary took before kong: a "-name" longer than a
// letter becomes "--name". A negative number stays a value.
//
// Only a token in flag position is rewritten: the token after a flag that
// takes a value (takesValue reports which do, by name; see ValueFlags) is
// that flag's value, kept as given (--kafka-sasl-password -Xy7secret must
// not send "--Xy7secret"), and so is everything after "--". A flag given
// as --name=value carries its value in the same token.
func Normalize(args []string, takesValue func(name string) bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' && (a[1] < '0' || a[1] > '9') {
			a = "-" + a
		}
		out = append(out, a)
		if name, ok := strings.CutPrefix(a, "--"); ok && !strings.Contains(name, "=") && takesValue(name) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return out
}

// ValueFlags reports, for Normalize, whether the flag of model named name
// takes a value as the next argument: every flag but a bool one (--all,
// whose value can only be given as --all=false) and --help.
func ValueFlags(model *kong.Application) func(name string) bool {
	takes := map[string]bool{}
	_ = kong.Visit(model, func(n kong.Visitable, next kong.Next) error {
		if f, ok := n.(*kong.Flag); ok && !f.IsBool() && !f.IsCounter() {
			takes[f.Name] = true
		}
		return next(nil)
	})
	return func(name string) bool { return takes[name] }
}
