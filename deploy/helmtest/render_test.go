package helmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/engine"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, from this package's directory.
const chartDir = "../helm/outbox-relay"

// release is the release the tests render, as `helm install orders
// --namespace outbox` would.
var release = common.ReleaseOptions{Name: "orders", Namespace: "outbox", Revision: 1, IsInstall: true}

// requiredValues are the values the chart cannot default (it fails without
// them): the smallest install.
const requiredValues = `
database:
  existingSecret: relay-db
kafka:
  brokers: kafka:9092
`

// render renders the chart with the YAML documents of values merged over
// values.yaml in order, as repeated `helm template -f` would, and returns
// the manifests by template path.
func render(t *testing.T, values ...string) (map[string]string, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	user := map[string]any{}
	for _, v := range values {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(v), &m); err != nil {
			t.Fatalf("values: %v", err)
		}
		user = util.MergeTables(m, user)
	}
	top, err := util.ToRenderValues(chrt, user, release, nil)
	if err != nil {
		return nil, err
	}
	// Strict: a template reading a value values.yaml lacks fails.
	return engine.Engine{Strict: true}.RenderWithContext(t.Context(), chrt, top)
}

// mustRender is render that fails the test on an error.
func mustRender(t *testing.T, values ...string) map[string]string {
	t.Helper()
	out, err := render(t, values...)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return out
}

// readFile returns a file of the repository, relative to this package.
func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// documents splits the rendered manifests into their YAML documents, by
// template path with an index when a template holds several, leaving out
// NOTES.txt and documents that are empty or only comments.
func documents(manifests map[string]string) map[string]string {
	docs := map[string]string{}
	for path, text := range manifests {
		if strings.HasSuffix(path, "NOTES.txt") {
			continue
		}
		for i, doc := range strings.Split(text, "\n---") {
			if !hasContent(doc) {
				continue
			}
			name := path
			if i > 0 {
				name += "#" + string(rune('0'+i))
			}
			docs[name] = doc
		}
	}
	return docs
}

func hasContent(doc string) bool {
	for line := range strings.SplitSeq(doc, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return true
		}
	}
	return false
}
