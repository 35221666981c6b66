package helmtest

import (
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"sigs.k8s.io/yaml"
)

// TestLint runs `helm lint`'s rules (Chart.yaml, values against
// values.schema.json, templates) for each value set; any warning fails.
func TestLint(t *testing.T) {
	for name, values := range map[string]string{"default": requiredValues, "full": readFile(t, fullValues), "managed": readFile(t, managedValues)} {
		t.Run(name, func(t *testing.T) {
			vals := map[string]any{}
			if err := yaml.Unmarshal([]byte(values), &vals); err != nil {
				t.Fatal(err)
			}
			for _, m := range lint.RunAll(chartDir, vals, release.Namespace).Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				}
			}
		})
	}
}
