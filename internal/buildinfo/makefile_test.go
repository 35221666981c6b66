package buildinfo

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// makefileVar returns the right-hand side of "name := ..." in a Makefile.
func makefileVar(t *testing.T, mk, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*:=\s*(.*)$`).FindStringSubmatch(mk)
	if m == nil {
		t.Fatalf("Makefile has no %s :=", name)
	}
	return m[1]
}

// makeTarget returns the recipe of target in a Makefile (its tab-indented
// lines, continuations joined).
func makeTarget(t *testing.T, mk, target string) string {
	t.Helper()
	_, after, ok := strings.Cut(mk, "\n"+target+":")
	if !ok {
		t.Fatalf("Makefile has no %s target", target)
	}
	var recipe []string
	for _, l := range strings.Split(after, "\n")[1:] {
		if !strings.HasPrefix(l, "\t") {
			break
		}
		recipe = append(recipe, strings.TrimSpace(l))
	}
	return strings.ReplaceAll(strings.Join(recipe, "\n"), "\\\n", " ")
}

// TestMakefileStampsBuildInfo checks that `make build` and `make release`
// stamp version, revision and date into this package, and that release
// builds static, stripped, path-independent binaries for the four
// platforms with their checksums.
func TestMakefileStampsBuildInfo(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	mk := string(b)
	ldflags := strings.ReplaceAll(makefileVar(t, mk, "LDFLAGS"), "$(BUILDINFO)", makefileVar(t, mk, "BUILDINFO"))
	checkStampFlags(t, "Makefile LDFLAGS", stampFlags(ldflags),
		map[string]string{"version": "$(VERSION)", "revision": "$(REVISION)", "date": "$(BUILD_DATE)"})
	for name, want := range map[string]string{
		"VERSION":    "git describe --tags --always --dirty",
		"REVISION":   "git rev-parse HEAD",
		"BUILD_DATE": "date -u +%Y-%m-%dT%H:%M:%SZ",
	} {
		if v := makefileVar(t, mk, name); !strings.Contains(v, want) {
			t.Errorf("%s := %s, want it from %q", name, v, want)
		}
	}
	if !strings.HasSuffix(makefileVar(t, mk, "VERSION"), ",dev)") {
		t.Error("VERSION has no dev fallback outside a git checkout")
	}

	if build := makeTarget(t, mk, "build"); !strings.Contains(build, "-ldflags '$(LDFLAGS)'") {
		t.Errorf("make build does not pass $(LDFLAGS):\n%s", build)
	}
	release := makeTarget(t, mk, "release")
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-ldflags '-s -w $(LDFLAGS)'", "./cmd/outbox-relay",
		"outbox-relay_$(VERSION)_$${os}_$${arch}", "sha256sum", ">SHA256SUMS"} {
		if !strings.Contains(release, want) {
			t.Errorf("make release lacks %q:\n%s", want, release)
		}
	}
	platforms := strings.Fields(makefileVar(t, mk, "RELEASE_PLATFORMS"))
	for _, want := range []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"} {
		if !strings.Contains(" "+strings.Join(platforms, " ")+" ", " "+want+" ") {
			t.Errorf("RELEASE_PLATFORMS %v lacks %s", platforms, want)
		}
	}
	if makefileVar(t, mk, "DIST") != "dist" {
		t.Error("release binaries do not go to dist/")
	}
}
