package doctor

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestPgDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "1min": time.Minute, "60s": time.Minute, "500ms": 500 * time.Millisecond, "2h": 2 * time.Hour, "1500": 1500 * time.Millisecond} {
		got, err := pgDuration(in)
		if err != nil || got != want {
			t.Errorf("pgDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := pgDuration("soon"); err == nil {
		t.Error("pgDuration accepted garbage")
	}
}

func TestReport(t *testing.T) {
	r := &Report{}
	r.add("a", Pass, "fine", "")
	r.add("b", Warn, "meh", "do x")
	if r.Failed() {
		t.Fatal("warnings count as a failure")
	}
	r.add("c", Fail, "broken", "do y")
	if !r.Failed() {
		t.Fatal("a fail does not fail the report")
	}
	var b bytes.Buffer
	r.Write(&b)
	for _, want := range []string{"FAIL  c", "fix: do y", "1 passed, 1 warnings, 1 failed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}
