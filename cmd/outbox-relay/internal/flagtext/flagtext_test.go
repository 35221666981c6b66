package flagtext

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// find names Window.StallTimeout and Leader.Timeout.
func find(s string) map[string]string {
	out := map[string]string{}
	for field, flag := range map[string]string{"Window.StallTimeout": "--stall-timeout", "Leader.Timeout": "--leader-timeout"} {
		if strings.Contains(s, field) {
			out[field] = flag
		}
	}
	return out
}

// TestHandler: the record is written as the library wrote it, with the
// fields named in its message, string, error, group and With attributes,
// and their flags, in one "flags" attribute; a record naming none has
// none.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), find)).With("why", "over Window.StallTimeout")
	log.Info("stalled for Window.StallTimeout", "error", errors.New("see Leader.Timeout"),
		slog.Group("g", "reason", "Window.StallTimeout"), "n", 3)
	got := buf.String()
	for _, want := range []string{`msg="stalled for Window.StallTimeout"`, `why="over Window.StallTimeout"`, `error="see Leader.Timeout"`,
		"flags.Leader.Timeout=--leader-timeout", "flags.Window.StallTimeout=--stall-timeout", "n=3"} {
		if !strings.Contains(got, want) {
			t.Errorf("lacks %s: %s", want, got)
		}
	}
	buf.Reset()
	slog.New(Handler(slog.NewTextHandler(&buf, nil), find)).Info("nothing to name", "n", 1)
	if strings.Contains(buf.String(), "flags") {
		t.Errorf("flags without a field: %s", buf.String())
	}
}
