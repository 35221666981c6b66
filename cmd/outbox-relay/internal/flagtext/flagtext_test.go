package flagtext

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
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

// /readyz and /metrics text bodies are translated, other paths and
// non-text bodies are not.
func TestHTTP(t *testing.T) {
	lib := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ct := "text/plain"
		if r.URL.Query().Get("binary") != "" {
			ct = "application/vnd.google.protobuf"
		}
		w.Header().Set("Content-Type", ct)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("stalled: Window.StallTimeout"))
	})
	srv := httptest.NewServer(HTTP(lib, text))
	defer srv.Close()
	for path, want := range map[string]string{
		"/readyz":           "stalled: --stall-timeout",
		"/metrics":          "stalled: --stall-timeout",
		"/metrics?binary=1": "stalled: Window.StallTimeout",
		"/healthz":          "stalled: Window.StallTimeout",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		resp.Body.Close()
		if b.String() != want || resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("%s: %d %q, want 503 %q", path, resp.StatusCode, b.String(), want)
		}
	}
}
