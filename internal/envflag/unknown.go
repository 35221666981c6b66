package envflag

import (
	"reflect"
	"slices"
	"strings"
)

// UnknownVar is an environment variable with a binder's prefix that no
// flag reads, with the known name closest to it ("" when none is close).
type UnknownVar struct{ Name, Closest string }

// Unknown returns the variables of environ (os.Environ's form) that
// start with prefix and are not in known, sorted, each once, with its
// closest known name: for X_FILE the flag X itself when X is known (only
// secrets come from files), otherwise Closest over the known names
// without the prefix.
func Unknown(environ []string, prefix string, known map[string]bool) []UnknownVar {
	var names []string
	for _, kv := range environ {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, prefix) && !known[name] {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	candidates := make([]string, 0, len(known))
	for name := range known {
		candidates = append(candidates, strings.TrimPrefix(name, prefix))
	}
	var out []UnknownVar
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		v := UnknownVar{Name: name}
		if base, ok := strings.CutSuffix(name, "_FILE"); ok && known[base] {
			v.Closest = base
		} else if c := Closest(strings.ToUpper(strings.TrimPrefix(name, prefix)), candidates); c != "" {
			v.Closest = prefix + c
		}
		out = append(out, v)
	}
	return out
}

// ExplicitZeros sets every integer (and duration) field of the struct v
// points to that is 0 while the same field of def is not to -1, through
// nested structs. It is for configurations where a zero field means its
// default and a negative one "off", bound from flags that show their
// defaults: there a 0 is the user's, and it must reach the configuration
// as a value (off, or one its validation refuses), not turn into the
// default.
func ExplicitZeros(v, def any) {
	zerosToNegative(reflect.ValueOf(v).Elem(), reflect.ValueOf(def))
}

func zerosToNegative(v, def reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				zerosToNegative(v.Field(i), def.Field(i))
			}
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Int() == 0 && def.Int() != 0 {
			v.SetInt(-1)
		}
	}
}
