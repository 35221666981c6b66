package helmtest

import (
	"net"
	"regexp"
	"strconv"
	"testing"
)

// What the binary serves, read from its source and its generated flag
// documentation rather than restated here, so the chart's test follows
// the binary.

// healthSource is where the relay's probe endpoints are registered.
const healthSource = "../../relay/health.go"

var handlePattern = regexp.MustCompile(`mux\.Handle(?:Func)?\("(/[a-z]+)"`)

// servedPaths returns the paths relay.Handler registers.
func servedPaths(t *testing.T) map[string]bool {
	t.Helper()
	paths := map[string]bool{}
	for _, m := range handlePattern.FindAllStringSubmatch(readFile(t, healthSource), -1) {
		paths[m[1]] = true
	}
	return paths
}

func healthzPath(t *testing.T) string { return servedPath(t, "/healthz") }
func readyzPath(t *testing.T) string  { return servedPath(t, "/readyz") }

// servedPath returns p after checking the relay serves it.
func servedPath(t *testing.T, p string) string {
	t.Helper()
	if !servedPaths(t)[p] {
		t.Fatalf("%s no longer registers %s: update the chart's probes and this test", healthSource, p)
	}
	return p
}

// metricsPort is the port of --metrics-addr's default in configuration.md.
func metricsPort(t *testing.T, flags flagTable) int32 {
	t.Helper()
	def := flags["OUTBOX_RELAY_METRICS_ADDR"].def
	_, port, err := net.SplitHostPort(def)
	if err != nil {
		t.Fatalf("--metrics-addr default %q: %v", def, err)
	}
	n, err := strconv.ParseInt(port, 10, 32)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}
