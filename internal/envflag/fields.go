package envflag

import (
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Fields registers the fields of the struct root points to, and of the
// structs nested in it, under their Go paths: prefix + "Publish.MaxBatch".
// A flag registered afterwards with a pointer to one of them sets that
// field (as To would record it), so its path is derived from where the
// flag's value goes and cannot drift from it.
func (b *Binder) Fields(root any, prefix string) {
	v := reflect.ValueOf(root)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		panic("envflag: Fields of a " + v.Type().String() + ", want a pointer to a struct")
	}
	b.walk(v.Elem(), prefix)
}

func (b *Binder) walk(v reflect.Value, prefix string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		path := prefix + f.Name
		// The key is the typed pointer: a struct and its first field
		// share an address, not a type.
		b.paths[v.Field(i).Addr().Interface()] = path
		if f.Type.Kind() == reflect.Struct {
			b.walk(v.Field(i), path+".")
		}
	}
}

// FlagNames returns the flag ("--max-batch") of every field a flag of b
// sets, by the field's Go path, as text naming the field should read: the
// field of a NotBool flag is set by its false ("--failover-slot=false").
// The groups' names (Group) are not fields.
func (b *Binder) FlagNames() map[string]string {
	names := maps.Clone(b.fields)
	for g := range b.groups {
		delete(names, g)
	}
	for f := range b.negated {
		names[f] += "=false"
	}
	return names
}

// FlagText returns the function that rewrites text naming configuration
// fields by their Go paths (a library's error, log message or reason:
// "exceeds Publish.MaxBatchBytes") in the terms of names, the flags that
// set them (FlagNames): "exceeds --max-batch-bytes". It builds one
// strings.Replacer, longest path first, so that Publish.MaxBatchBytes is
// not read as Publish.MaxBatch.
func FlagText(names map[string]string) func(string) string {
	paths := slices.SortedFunc(maps.Keys(names), func(x, y string) int {
		if d := len(y) - len(x); d != 0 {
			return d
		}
		return strings.Compare(x, y)
	})
	pairs := make([]string, 0, 2*len(paths))
	for _, p := range paths {
		pairs = append(pairs, p, names[p])
	}
	return strings.NewReplacer(pairs...).Replace
}
