// Command printinfo prints the build information of package buildinfo, one
// field a line; buildinfo's tests build it with -ldflags -X to prove the
// stamping reaches the package.
package main

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
)

func main() {
	i := buildinfo.Read()
	fmt.Printf("version=%s\nrevision=%s\ndate=%s\ngoversion=%s\n", i.Version, i.Revision, i.BuildDate, i.GoVersion)
}
