// Package buildinfo reports the binary's version, revision, build date and
// Go version: stamped with -ldflags -X at build time, else read from the
// module information Go embeds (go install …@vX reports vX).
//
// Minimal placeholder: the lead keeps the complete version at merge.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

// Stamped with -ldflags "-X github.com/outbox-relay/outbox-relay/internal/buildinfo.version=…".
var version, revision, buildDate string

// Version is the release version ("v1.2.3"), or "dev".
func Version() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// Revision is the VCS revision, or "unknown".
func Revision() string {
	if revision != "" {
		return revision
	}
	return setting("vcs.revision", "unknown")
}

// BuildDate is when the binary was built (or its commit's time), or
// "unknown".
func BuildDate() string {
	if buildDate != "" {
		return buildDate
	}
	return setting("vcs.time", "unknown")
}

// GoVersion is the Go release that built the binary.
func GoVersion() string { return runtime.Version() }

func setting(key, def string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == key && s.Value != "" {
				return s.Value
			}
		}
	}
	return def
}
