package integration

// This file has no build tag: TestSuiteMembership runs with the unit tests
// (make unit, make test-fast), without servers, and reads the integration
// tests as source.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// suiteTags maps each suite constant of suites_test.go to the build tags of
// its run: the stack's suite is the run without a suite tag.
var suiteTags = map[string]string{
	"stack":         "integration",
	"cluster":       "integration,suite_cluster",
	"kafkaVersions": "integration,suite_kafka_versions",
	"pgVersions":    "integration,suite_pg_versions",
}

// TestSuiteMembership fails when an integration test belongs to no suite
// (its first statement is not inSuites with parallel or exclusive and at
// least one suite), or when a suite it names is not run by `make test`
// (no recipe that `make test` reaches runs ./integration/ with that suite's
// tags).
func TestSuiteMembership(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string][]string{} // suite -> tests
	tests := 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Name.Name == "TestMain" {
				continue
			}
			if name == "suites_check_test.go" {
				continue // this check itself is a unit test
			}
			tests++
			suites, err := declaredSuites(fn)
			if err != nil {
				t.Errorf("%s: %s: %v", fset.Position(fn.Pos()), fn.Name.Name, err)
				continue
			}
			for _, s := range suites {
				used[s] = append(used[s], fn.Name.Name)
			}
		}
	}
	if tests == 0 {
		t.Fatal("no integration tests found")
	}
	run, err := makeTestTags("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	for s, names := range used {
		tags, ok := suiteTags[s]
		if !ok {
			t.Errorf("suite %q (of %v) has no build tags in suiteTags", s, names)
			continue
		}
		if !slices.Contains(run, tags) {
			t.Errorf("suite %s (go test -tags %s ./integration/) is not run by make test, so %d tests never run there: %v; make test runs -tags %v",
				s, tags, len(names), names, run)
		}
	}
	var names []string
	for s, n := range used {
		names = append(names, fmt.Sprintf("%s=%d", s, len(n)))
	}
	sort.Strings(names)
	t.Logf("%d integration tests; suites: %s; make test runs -tags %v", tests, strings.Join(names, " "), run)
}

// declaredSuites returns the suite constants the test's first statement,
// inSuites(t, parallel|exclusive, a|b|...), names.
func declaredSuites(fn *ast.FuncDecl) ([]string, error) {
	if fn.Body == nil || len(fn.Body.List) == 0 {
		return nil, errNoSuites
	}
	es, ok := fn.Body.List[0].(*ast.ExprStmt)
	if !ok {
		return nil, errNoSuites
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok || len(call.Args) != 3 {
		return nil, errNoSuites
	}
	if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "inSuites" {
		return nil, errNoSuites
	}
	if id, ok := call.Args[1].(*ast.Ident); !ok || (id.Name != "parallel" && id.Name != "exclusive") {
		return nil, errSharing
	}
	var suites []string
	var walk func(e ast.Expr) bool
	walk = func(e ast.Expr) bool {
		switch e := e.(type) {
		case *ast.Ident:
			suites = append(suites, e.Name)
			return true
		case *ast.BinaryExpr:
			return e.Op == token.OR && walk(e.X) && walk(e.Y)
		case *ast.ParenExpr:
			return walk(e.X)
		}
		return false
	}
	if !walk(call.Args[2]) {
		return nil, errSuiteExpr
	}
	return suites, nil
}

type checkError string

func (e checkError) Error() string { return string(e) }

const (
	errNoSuites  checkError = "the first statement must be inSuites(t, parallel|exclusive, suite|suite...): it belongs to no suite"
	errSharing   checkError = "inSuites' second argument must be parallel or exclusive"
	errSuiteExpr checkError = "inSuites' third argument must be suite constants joined by |"
)

var (
	ruleLine = regexp.MustCompile(`^([A-Za-z0-9_.-]+):([^=]|$)`)
	// $(MAKE) ARGS (also as scripts/lib/phases.sh's `phase NAME $(MAKE) ARGS` and
	// `beside NAME NICE $(MAKE) ARGS`), the Makefile's $(call phase,ARGS), which runs
	// $(MAKE) ARGS, or its $(call beside,ARGS1,ARGS2), which runs $(MAKE) ARGS1 and $(MAKE) ARGS2.
	subMake    = regexp.MustCompile(`(?:\$\(MAKE\)|\$\(call (?:phase|beside),)([^;\n|&]*)`)
	goTestTags = regexp.MustCompile(`-tags\s+(\S+)`)
	// go test -c compiles a suite's binary without running it (make it-build): no run.
	compileOnly = regexp.MustCompile(`\btest\s+-c\b`)
)

// makeTestTags returns the -tags of every `go test ... ./integration/`
// command in the recipes that `make test` reaches through $(MAKE) TARGET.
func makeTestTags(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// Join continuation lines, then split the recipes by rule.
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	recipes := map[string]string{}
	var cur string
	for _, line := range strings.Split(text, "\n") {
		if m := ruleLine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			continue
		}
		if strings.HasPrefix(line, "\t") && cur != "" {
			recipes[cur] += line + "\n"
		} else if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "#") {
			cur = ""
		}
	}
	seen := map[string]bool{}
	var tags []string
	queue := []string{"test"}
	for len(queue) > 0 {
		target := queue[0]
		queue = queue[1:]
		if seen[target] {
			continue
		}
		seen[target] = true
		r := recipes[target]
		// $(MAKE) [flags] [VAR=value] target...: every word that names a rule.
		for _, m := range subMake.FindAllStringSubmatch(r, -1) {
			words := strings.FieldsFunc(m[1], func(c rune) bool { return c == ' ' || c == '\t' || c == ',' })
			for _, w := range words {
				w = strings.TrimRight(w, ")") // the end of $(call phase,...)
				if _, ok := recipes[w]; ok {
					queue = append(queue, w)
				}
			}
		}
		// go test commands of ./integration/ (one command per ; or line).
		for _, cmd := range strings.FieldsFunc(r, func(c rune) bool { return c == ';' || c == '\n' }) {
			if !strings.Contains(cmd, "./integration/") || compileOnly.MatchString(cmd) {
				continue
			}
			if m := goTestTags.FindStringSubmatch(cmd); m != nil && !slices.Contains(tags, m[1]) {
				tags = append(tags, m[1])
			}
		}
	}
	sort.Strings(tags)
	return tags, nil
}
