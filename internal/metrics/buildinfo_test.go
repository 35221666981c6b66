package metrics

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBuildInfoIsExported(t *testing.T) {
	r := New()
	i := buildinfo.Read()
	want := `# HELP outbox_relay_build_info Always 1; the labels name the running build: version, VCS revision and the Go version that built it.
# TYPE outbox_relay_build_info gauge
outbox_relay_build_info{goversion="` + i.GoVersion + `",revision="` + i.Revision + `",version="` + i.Version + `"} 1
`
	if err := testutil.GatherAndCompare(r.Registry, strings.NewReader(want), "outbox_relay_build_info"); err != nil {
		t.Error(err)
	}
}

func TestBuildInfoLabels(t *testing.T) {
	g := newBuildInfo(buildinfo.Info{Version: "v1.2.3", Revision: "abc", BuildDate: "2026-01-01T00:00:00Z", GoVersion: "go1.26.0"})
	want := `# HELP outbox_relay_build_info Always 1; the labels name the running build: version, VCS revision and the Go version that built it.
# TYPE outbox_relay_build_info gauge
outbox_relay_build_info{goversion="go1.26.0",revision="abc",version="v1.2.3"} 1
`
	if err := testutil.CollectAndCompare(g, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

func TestBuildInfoIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), "`outbox_relay_build_info{version,revision,goversion}`") {
		t.Error("docs/observability.md does not list outbox_relay_build_info{version,revision,goversion}")
	}
}
