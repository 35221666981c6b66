package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "false"},
	}
	cases := []struct {
		name    string
		stamped Info
		bi      *debug.BuildInfo
		want    Info
	}{
		{
			name: "nothing known",
			want: Info{Version: "dev", Revision: "unknown", BuildDate: "unknown", GoVersion: "go1.26.0"},
		},
		{
			name:    "stamped by the linker wins over build information",
			stamped: Info{Version: "v1.2.3-4-gabc-dirty", Revision: "abc", BuildDate: "2026-03-04T05:06:07Z"},
			bi:      &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v9.9.9"}, Settings: vcs},
			want:    Info{Version: "v1.2.3-4-gabc-dirty", Revision: "abc", BuildDate: "2026-03-04T05:06:07Z", GoVersion: "go1.26.0"},
		},
		{
			name: "go install @vX: the module version",
			bi:   &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "v1.4.0"}},
			want: Info{Version: "v1.4.0", Revision: "unknown", BuildDate: "unknown", GoVersion: "go1.26.0"},
		},
		{
			name: "go build in a checkout: VCS settings",
			bi:   &debug.BuildInfo{Main: debug.Module{Path: ModulePath, Version: "(devel)"}, Settings: vcs},
			want: Info{Version: "dev", Revision: "0123456789abcdef0123456789abcdef01234567", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.0"},
		},
		{
			name:    "only the version stamped: the rest from VCS",
			stamped: Info{Version: "v2.0.0"},
			bi:      &debug.BuildInfo{Main: debug.Module{Path: ModulePath}, Settings: vcs},
			want:    Info{Version: "v2.0.0", Revision: "0123456789abcdef0123456789abcdef01234567", BuildDate: "2026-01-02T03:04:05Z", GoVersion: "go1.26.0"},
		},
		{
			name: "embedded in another service: the dependency's version, not the service's",
			bi: &debug.BuildInfo{
				Main: debug.Module{Path: "example.com/orders", Version: "v0.3.0"},
				Deps: []*debug.Module{{Path: "github.com/jackc/pgx/v5", Version: "v5.7.0"}, {Path: ModulePath, Version: "v1.1.0"}},
			},
			want: Info{Version: "v1.1.0", Revision: "unknown", BuildDate: "unknown", GoVersion: "go1.26.0"},
		},
		{
			name: "embedded with a replace directive: the replacement's version",
			bi: &debug.BuildInfo{
				Main: debug.Module{Path: "example.com/orders"},
				Deps: []*debug.Module{{Path: ModulePath, Version: "v1.1.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.1.1"}}},
			},
			want: Info{Version: "v1.1.1", Revision: "unknown", BuildDate: "unknown", GoVersion: "go1.26.0"},
		},
		{
			name: "embedded without depending on the module version (local replace)",
			bi: &debug.BuildInfo{
				Main: debug.Module{Path: "example.com/orders"},
				Deps: []*debug.Module{{Path: ModulePath, Version: "v1.1.0", Replace: &debug.Module{Path: "../outbox-relay"}}},
			},
			want: Info{Version: "dev", Revision: "unknown", BuildDate: "unknown", GoVersion: "go1.26.0"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := resolve(c.stamped, c.bi, "go1.26.0"); got != c.want {
				t.Errorf("resolve:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestAccessorsAgreeWithRead(t *testing.T) {
	i := Read()
	if Version() != i.Version || Revision() != i.Revision || BuildDate() != i.BuildDate || GoVersion() != i.GoVersion {
		t.Errorf("accessors disagree with Read() = %+v", i)
	}
	if i.GoVersion != runtime.Version() {
		t.Errorf("GoVersion %q, want %q", i.GoVersion, runtime.Version())
	}
	if i.Version == "" || i.Revision == "" || i.BuildDate == "" {
		t.Errorf("Read() left a field empty: %+v", i)
	}
}

// TestLinkerStamping builds a program with -X flags spelt as the Makefile
// and the Dockerfile spell them (checkStampFlags holds those to the same
// names) and checks that the values reach the package: the linker ignores
// a misspelt -X path silently, so only running the result proves it.
func TestLinkerStamping(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "printinfo")
	ldflags := "-s -w -X " + pkgPath + ".version=v7.8.9-test" +
		" -X " + pkgPath + ".revision=feedface" +
		" -X " + pkgPath + ".date=2026-05-06T07:08:09Z"
	build := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./testdata/printinfo")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "version=v7.8.9-test\nrevision=feedface\ndate=2026-05-06T07:08:09Z\ngoversion=" + runtime.Version() + "\n"
	if string(out) != want {
		t.Errorf("stamped binary printed\n%s\nwant\n%s", out, want)
	}
	checkStampFlags(t, "the test's flags", stampFlags(ldflags), nil)
}
