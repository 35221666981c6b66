// Package buildinfo reports which build of outbox-relay is running: the
// version, VCS revision and build date stamped by the release tooling, with
// the Go toolchain's own build information as the fallback.
//
// Release builds (make build, make release, the Dockerfile) stamp the three
// values with the linker:
//
//	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.version=v1.2.3
//	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.revision=<commit>
//	-X github.com/outbox-relay/outbox-relay/internal/buildinfo.date=<RFC 3339, UTC>
//
// A binary built without them still knows what it can: `go install
// …/cmd/outbox-relay@v1.2.3` records the module version v1.2.3, and a build
// from a git checkout records vcs.revision and vcs.time. A service that
// embeds package relay reports the outbox-relay module version it depends
// on, not its own.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// The values stamped by -ldflags -X. They must stay package-level string
// variables without an initialiser computed at run time, or the linker
// ignores -X silently (dockerfile_test.go checks the names the build files
// use against this declaration).
var (
	version  string
	revision string
	date     string
)

// ModulePath is the module whose version is reported.
const ModulePath = "github.com/outbox-relay/outbox-relay"

// Placeholders for values neither the linker nor the toolchain provided.
const (
	// DevVersion is the version of a build with no version information,
	// e.g. `go run` or `go build` outside a git checkout.
	DevVersion = "dev"
	// Unknown is the revision and build date when nothing recorded them.
	Unknown = "unknown"
)

// Info describes one build.
type Info struct {
	Version   string // a git describe or module version such as v1.2.3; DevVersion if unknown
	Revision  string // full VCS commit hash; Unknown if unknown
	BuildDate string // RFC 3339: the build time when stamped, else the commit time; Unknown if unknown
	GoVersion string // the Go toolchain that built the binary, e.g. go1.26.0
}

// Read returns the running binary's build information. It is cheap enough
// to call per use, so nothing is cached.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(Info{Version: version, Revision: revision, BuildDate: date}, bi, runtime.Version())
}

// Version is Read().Version.
func Version() string { return Read().Version }

// Revision is Read().Revision.
func Revision() string { return Read().Revision }

// BuildDate is Read().BuildDate.
func BuildDate() string { return Read().BuildDate }

// GoVersion is the Go toolchain that built the binary.
func GoVersion() string { return runtime.Version() }

// resolve fills the fields the linker did not stamp from bi (nil when the
// binary has no build information), then from the placeholders.
func resolve(stamped Info, bi *debug.BuildInfo, goVersion string) Info {
	out := stamped
	out.GoVersion = goVersion
	if bi != nil {
		if out.Version == "" {
			out.Version = moduleVersion(bi)
		}
		settings := map[string]string{}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
		if out.Revision == "" {
			out.Revision = settings["vcs.revision"]
		}
		if out.BuildDate == "" {
			out.BuildDate = settings["vcs.time"]
		}
	}
	if out.Version == "" {
		out.Version = DevVersion
	}
	if out.Revision == "" {
		out.Revision = Unknown
	}
	if out.BuildDate == "" {
		out.BuildDate = Unknown
	}
	return out
}

// moduleVersion is the version of ModulePath in bi: the main module's when
// outbox-relay is the binary, the dependency's when a service embeds it.
// "(devel)" (a build of the main module without a version) counts as none.
func moduleVersion(bi *debug.BuildInfo) string {
	m := &bi.Main
	if m.Path != ModulePath {
		m = nil
		for _, d := range bi.Deps {
			if d.Path == ModulePath {
				m = d
				break
			}
		}
	}
	if m == nil {
		return ""
	}
	if m.Replace != nil {
		m = m.Replace // a replace directive: the version actually built
	}
	if m.Version == "(devel)" {
		return ""
	}
	return m.Version
}
