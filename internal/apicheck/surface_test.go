package apicheck

import (
	"flag"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// update rewrites testdata/api.txt from the current surface:
// go test ./internal/apicheck -run TestAPIRecord -update.
var update = flag.Bool("update", false, "rewrite testdata/api.txt from the current public surface")

const recordFile = "testdata/api.txt"

// removed are names taken out of the API on purpose (issue 47: exported
// for one internal caller, for tests, or deprecated aliases of a name that
// stays). Regenerating the record does not bring one back: each needs a
// decision recorded here first.
var removed = map[string]string{
	"checkpoint Tracker.Begin":                "tests' shorthand for BeginTx (checkpoint/tracker_helpers_test.go)",
	"checkpoint Tracker.BeginXid":             "tests' shorthand for BeginTx (checkpoint/tracker_helpers_test.go)",
	"checkpoint Tracker.Track":                "tests' shorthand for TrackOrdinal (checkpoint/tracker_helpers_test.go)",
	"checkpoint Txn.Ack":                      "tests' shorthand; the relay acknowledges with AckSeq",
	"publisher Publisher.Begin":               "only the relay begins exactly-once transactions: internal/positions.Begin",
	"publisher Publisher.PositionPartition":   "internal/positions.Topic, which positions.Begin returns",
	"publisher Publisher.PositionPartitionOf": "internal/positions.Topic.PartitionOf",
	"publisher Publisher.PositionPartitions":  "internal/positions.Topic.Partitions",
	"relay LookupSource":                      "doctor's query: internal/outboxdb.ServerSource",
	"relay WithRegisterer":                    "deprecated alias: WithMetrics",
	"relay Relay.Health":                      "deprecated alias: Readiness",
}

// TestAPIRecord keeps testdata/api.txt, the public packages' exported
// declarations with their types - functions, types, constants, variables,
// struct fields and the method sets of the types (promoted methods
// included) - equal to the code. A change of the surface then shows in the
// review as a change of the record; run the test with -update to accept
// it. A name in removed fails it either way.
func TestAPIRecord(t *testing.T) {
	got := surface(t)
	for _, line := range got {
		if why, ok := removed[declName(line)]; ok {
			t.Errorf("%s is back in the API; it was removed on purpose (%s)", line, why)
		}
	}
	if t.Failed() {
		return // never into the record
	}
	text := strings.Join(got, "\n") + "\n"
	if *update {
		if err := os.WriteFile(recordFile, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(recordFile)
	if err != nil {
		t.Fatalf("%v (create it with -update)", err)
	}
	old := strings.Split(strings.TrimSuffix(string(want), "\n"), "\n")
	for _, l := range got {
		if !slices.Contains(old, l) {
			t.Errorf("new in the API: %s", l)
		}
	}
	for _, l := range old {
		if !slices.Contains(got, l) {
			t.Errorf("gone from the API: %s", l)
		}
	}
	if t.Failed() {
		t.Log("if the change is meant, run go test ./internal/apicheck -run TestAPIRecord -update and commit " + recordFile)
	}
}

// TestRemovedNamesAreChecked: every name in removed is a declaration the
// record's format can show, in a public package, so a typo cannot make the
// guard vacuous.
func TestRemovedNamesAreChecked(t *testing.T) {
	for name := range removed {
		pkg, _, ok := strings.Cut(name, " ")
		if !ok || !slices.Contains(public, pkg) {
			t.Errorf("removed[%q]: not \"<public package> <name>\"", name)
		}
	}
	if n := declName("relay method (*Relay).Health() Readiness"); n != "relay Relay.Health" {
		t.Fatalf("declName = %q", n)
	}
}

// declName is the "<package> <name>" of a record line, a method or field
// as Type.Name whatever its receiver: "relay Relay.Readiness" for
// "relay method (*Relay).Readiness() Readiness".
func declName(line string) string {
	f := strings.SplitN(line, " ", 3)
	if len(f) < 3 {
		return line
	}
	name := strings.TrimPrefix(strings.TrimPrefix(f[2], "(*"), "(")
	name = strings.Replace(name, ").", ".", 1)
	if i := strings.IndexAny(name, " (["); i > 0 {
		name = name[:i]
	}
	return f[0] + " " + name
}

// surface lists the public packages' exported declarations, one a line,
// sorted: "<package> <kind> <declaration>". The packages come from their
// export data (go list -export), so the build tags and files are the
// ones a user compiles.
func surface(t *testing.T) []string {
	t.Helper()
	exports := map[string]string{}
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}={{.Export}}"}
	for _, p := range public {
		args = append(args, "./"+p)
	}
	for _, l := range strings.Fields(goCmd(t, args...)) {
		if path, file, ok := strings.Cut(l, "="); ok && file != "" {
			exports[path] = file
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	var lines []string
	for _, p := range public {
		pkg, err := imp.Import(module + "/" + p)
		if err != nil {
			t.Fatalf("import %s: %v", p, err)
		}
		lines = append(lines, declarations(p, pkg)...)
	}
	slices.Sort(lines)
	return lines
}

// declarations are pkg's exported names, with their types written
// relative to pkg (other packages by their path).
func declarations(name string, pkg *types.Package) []string {
	qual := func(p *types.Package) string {
		if p == pkg {
			return ""
		}
		return p.Path()
	}
	var out []string
	add := func(kind, decl string) { out = append(out, name+" "+kind+" "+decl) }
	scope := pkg.Scope()
	for _, n := range scope.Names() {
		obj := scope.Lookup(n)
		if !obj.Exported() {
			continue
		}
		switch obj := obj.(type) {
		case *types.Const:
			add("const", n+" "+types.TypeString(obj.Type(), qual))
		case *types.Var:
			add("var", n+" "+types.TypeString(obj.Type(), qual))
		case *types.Func:
			add("func", n+signature(obj.Type().(*types.Signature), qual))
		case *types.TypeName:
			if obj.IsAlias() {
				add("type", n+" = "+types.TypeString(obj.Type(), qual))
				continue
			}
			under := obj.Type().Underlying()
			kind := types.TypeString(under, qual)
			switch u := under.(type) {
			case *types.Struct:
				kind = "struct"
				for i := range u.NumFields() {
					if f := u.Field(i); f.Exported() {
						add("field", n+"."+f.Name()+" "+types.TypeString(f.Type(), qual))
					}
				}
			case *types.Interface:
				kind = "interface"
				for i := range u.NumMethods() {
					if m := u.Method(i); m.Exported() {
						add("method", n+"."+m.Name()+signature(m.Type().(*types.Signature), qual))
					}
				}
			}
			add("type", n+" "+kind)
			if _, ok := under.(*types.Interface); ok {
				continue
			}
			ms := types.NewMethodSet(types.NewPointer(obj.Type()))
			for i := range ms.Len() {
				m := ms.At(i).Obj()
				if !m.Exported() {
					continue
				}
				recv := "(*" + n + ")"
				if types.NewMethodSet(obj.Type()).Lookup(m.Pkg(), m.Name()) != nil {
					recv = "(" + n + ")"
				}
				add("method", recv+"."+m.Name()+signature(m.Type().(*types.Signature), qual))
			}
		}
	}
	return out
}

// signature is sig without its receiver and parameter names, which are
// no part of the surface: "(context.Context, ...string) (int, error)".
func signature(sig *types.Signature, qual types.Qualifier) string {
	tuple := func(t *types.Tuple, variadic bool) []string {
		var out []string
		for i := range t.Len() {
			typ := t.At(i).Type()
			if variadic && i == t.Len()-1 {
				out = append(out, "..."+types.TypeString(typ.(*types.Slice).Elem(), qual))
				continue
			}
			out = append(out, types.TypeString(typ, qual))
		}
		return out
	}
	var tparams []string
	for i := range sig.TypeParams().Len() {
		tp := sig.TypeParams().At(i)
		tparams = append(tparams, tp.Obj().Name()+" "+types.TypeString(tp.Constraint(), qual))
	}
	s := "(" + strings.Join(tuple(sig.Params(), sig.Variadic()), ", ") + ")"
	if len(tparams) > 0 {
		s = "[" + strings.Join(tparams, ", ") + "]" + s
	}
	switch res := tuple(sig.Results(), false); len(res) {
	case 0:
	case 1:
		s += " " + res[0]
	default:
		s += " (" + strings.Join(res, ", ") + ")"
	}
	return s
}
