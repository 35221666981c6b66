package envflag

import (
	"reflect"
	"strings"

	"github.com/alecthomas/kong"
)

// A command tree is a struct type whose fields tagged cmd are commands
// (a struct that implements the caller's command interface) or groups of
// them (a struct of commands). These read it from the type alone, without
// building kong's model: building one parses and interpolates every tag
// of every flag of every command, ten milliseconds for the relay's
// sixteen commands, so a command line builds only its own command's
// (Grammar), and the environment check and the flag names of other
// commands read the tags (Declared).

// CommandNames are the command lines of the tree root ("migrate",
// "slot status"), in its order; isCommand tells a command's type from a
// group's.
func CommandNames(root reflect.Type, isCommand func(reflect.Type) bool) []string {
	var names []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			if _, ok := f.Tag.Lookup("cmd"); !ok {
				continue
			}
			name := prefix + strings.ToLower(f.Name)
			if isCommand(f.Type) {
				names = append(names, name)
			} else {
				walk(f.Type, name+" ")
			}
		}
	}
	walk(root, "")
	return names
}

// CommandType is the struct type of command name ("dlq show") in root.
func CommandType(root reflect.Type, name string) reflect.Type {
	t := root
	for _, w := range strings.Fields(name) {
		f, _ := t.FieldByNameFunc(func(n string) bool { return strings.ToLower(n) == w })
		t = f.Type
	}
	return t
}

// Grammar is the part of root a command line ("dlq show") needs: the path
// of structs down to its command, for kong to build one command's model.
func Grammar(root reflect.Type, name string) any {
	var build func(t reflect.Type, path []string) reflect.Type
	build = func(t reflect.Type, path []string) reflect.Type {
		f, _ := t.FieldByNameFunc(func(n string) bool { return strings.ToLower(n) == path[0] })
		typ := f.Type
		if len(path) > 1 {
			typ = build(typ, path[1:])
		}
		return reflect.StructOf([]reflect.StructField{{Name: f.Name, Type: typ, Tag: f.Tag}})
	}
	return reflect.New(build(root, strings.Fields(name))).Interface()
}

// Declared calls visit with every flag field of command type t (its
// embedded groups' and its own; not its positional arguments).
func Declared(t reflect.Type, visit func(tag reflect.StructTag)) {
	for i := range t.NumField() {
		f := t.Field(i)
		switch {
		case f.Anonymous && f.Type.Kind() == reflect.Struct:
			Declared(f.Type, visit)
		case f.Tag.Get("name") != "" && f.Tag.Get("kong") != "-":
			if _, positional := f.Tag.Lookup("arg"); !positional {
				visit(f.Tag)
			}
		}
	}
}

// Flags are the flags of a command's node (its groups' and its own),
// without --help.
func Flags(node *kong.Node) []*kong.Flag {
	var out []*kong.Flag
	for _, group := range node.AllFlags(true) {
		for _, f := range group {
			if f.Name != "help" {
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
