package buildinfo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"sort"
	"testing"
)

// pkgPath is this package's import path, the prefix of every -X flag.
const pkgPath = ModulePath + "/internal/buildinfo"

// stampFlag is one -X pkg.name=value of a build file.
type stampFlag struct{ pkg, name, value string }

var stampFlagRE = regexp.MustCompile(`-X[ \t=]+([^ \t"']+)\.([A-Za-z_][A-Za-z0-9_]*)=([^ \t"']*)`)

// stampFlags returns the -X flags in s (a Makefile or Dockerfile text).
func stampFlags(s string) []stampFlag {
	var out []stampFlag
	for _, m := range stampFlagRE.FindAllStringSubmatch(s, -1) {
		out = append(out, stampFlag{pkg: m[1], name: m[2], value: m[3]})
	}
	return out
}

// stampableVars returns the package-level variables of buildinfo.go that
// the linker can set with -X: declared as string, with no initial value
// (an initialiser computed at run time would overwrite the stamped value).
func stampableVars(t testing.TB) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "buildinfo.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "string" || len(vs.Values) > 0 {
				continue
			}
			for _, n := range vs.Names {
				vars[n.Name] = true
			}
		}
	}
	return vars
}

// checkStampFlags asserts that flags set exactly version, revision and date
// of this package, each to a value (want[name] when given).
func checkStampFlags(t *testing.T, file string, flags []stampFlag, want map[string]string) {
	t.Helper()
	vars := stampableVars(t)
	if len(vars) != 3 {
		t.Fatalf("buildinfo.go declares stampable vars %v; the build files stamp three", vars)
	}
	seen := map[string]bool{}
	for _, f := range flags {
		if f.pkg != pkgPath {
			t.Errorf("%s: -X %s.%s: the package is %s", file, f.pkg, f.name, pkgPath)
		}
		if !vars[f.name] {
			t.Errorf("%s: -X %s.%s: buildinfo has no such string variable (the linker would ignore it silently)", file, f.pkg, f.name)
		}
		if seen[f.name] {
			t.Errorf("%s: -X ...%s given twice", file, f.name)
		}
		seen[f.name] = true
		if w, ok := want[f.name]; ok && f.value != w {
			t.Errorf("%s: -X ...%s=%s, want =%s", file, f.name, f.value, w)
		}
	}
	for v := range vars {
		if !seen[v] {
			t.Errorf("%s does not stamp buildinfo.%s", file, v)
		}
	}
}

func TestStampFlagsParse(t *testing.T) {
	got := stampFlags(`-ldflags="-s -w -X example.com/p.version=${VERSION} -X example.com/p.date=$(BUILD_DATE)"`)
	want := []stampFlag{{"example.com/p", "version", "${VERSION}"}, {"example.com/p", "date", "$(BUILD_DATE)"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("stampFlags = %v, want %v", got, want)
	}
	vars := stampableVars(t)
	var names []string
	for v := range vars {
		names = append(names, v)
	}
	sort.Strings(names)
	if len(names) != 3 || names[0] != "date" || names[1] != "revision" || names[2] != "version" {
		t.Errorf("stampable vars %v, want [date revision version]", names)
	}
}
