package buildinfo

import (
	"strings"
	"testing"
)

// TestLicence: the repository carries the standard Apache-2.0 text (which
// pkg.go.dev recognises, and without which it hides the documentation),
// and the README and the image's OCI label say the same.
func TestLicence(t *testing.T) {
	lic := readRepoFile(t, "LICENSE")
	for _, want := range []string{
		"Apache License\n                           Version 2.0, January 2004",
		"TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION",
		"END OF TERMS AND CONDITIONS",
	} {
		if !strings.Contains(lic, want) {
			t.Errorf("LICENSE lacks %q: not the standard Apache-2.0 text", want)
		}
	}
	if readme := readRepoFile(t, "README.md"); !strings.Contains(readme, "[Apache-2.0](LICENSE)") {
		t.Error("README.md does not name the licence with a link to LICENSE")
	}
	stages := parseDockerfile(readRepoFile(t, "Dockerfile"))
	if l := keyValues(stages[len(stages)-1].all("LABEL"))["org.opencontainers.image.licenses"]; l != "Apache-2.0" {
		t.Errorf("image licence label %q, want Apache-2.0", l)
	}
}
