//go:build integration

package integration

import (
	"strings"
	"testing"
	"time"
)

// TestDoctor runs `outbox-relay doctor` on a migrated env of the shared
// stack (no fail, exit 0), then with a publication that also publishes
// updates (a warning with its fix), and on a temp cluster with
// wal_level=replica (a fail with its fix, exit 1).
func TestDoctor(t *testing.T) {
	env := NewEnv(t, EnvOptions{NoTopic: true})
	res := env.RunCLI(30*time.Second, nil, "doctor")
	t.Logf("doctor on the shared stack: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 || strings.Contains(res.Stdout, "FAIL") {
		t.Fatalf("doctor on a migrated env: exit %d, want 0 without FAIL\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"PASS  wal_level", "PASS  publication", "PASS  slot", "slot lag"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	env.Exec(`alter publication ` + env.Publication + ` set (publish = 'insert, update')`)
	res = env.RunCLI(30*time.Second, nil, "doctor")
	if res.Code != 0 || !strings.Contains(res.Stdout, "WARN  publication") ||
		!strings.Contains(res.Stdout, `fix: ALTER PUBLICATION "`+env.Publication+`" SET (publish = 'insert')`) {
		t.Errorf("publication publishing updates: exit %d, want 0 with a WARN and its fix\n%s", res.Code, res.Stdout)
	}

	pg := StartTempCluster(t, "wal_level=replica")
	res = env.RunCLI(30*time.Second, []string{"OUTBOX_RELAY_DATABASE_URL=" + pg.URL}, "doctor")
	t.Logf("doctor on wal_level=replica: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 1 {
		t.Errorf("exit %d, want 1 on a fail", res.Code)
	}
	for _, want := range []string{`FAIL  wal_level                is "replica"`, "fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	if !strings.Contains(res.Stderr, "some checks failed") {
		t.Errorf("stderr lacks the failure summary: %s", res.Stderr)
	}
}
