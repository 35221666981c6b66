package flagtext

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

var text = strings.NewReplacer("Window.StallTimeout", "--stall-timeout").Replace

// The message, string and error attributes, those of groups and those
// added with With are translated; other values are left alone.
func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewTextHandler(&buf, nil), text)).With("why", "over Window.StallTimeout")
	log.Info("stalled for Window.StallTimeout", "error", errors.New("see Window.StallTimeout"),
		slog.Group("g", "reason", "Window.StallTimeout"), "n", 3)
	got := buf.String()
	if strings.Contains(got, "Window.StallTimeout") || strings.Count(got, "--stall-timeout") != 4 || !strings.Contains(got, "n=3") {
		t.Fatalf("not translated: %s", got)
	}
}
