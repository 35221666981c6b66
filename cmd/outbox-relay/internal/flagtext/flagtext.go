// Package flagtext shows library text in the binary's terms: the
// libraries name what their user can change by its Go field path
// ("exceeds Publish.MaxBatchBytes"), the binary's user has flags, so the
// binary passes that text through a translation (built from how its flags
// are bound) wherever it shows it: its log records (Handler) and the
// relay's /readyz and /metrics (HTTP).
package flagtext

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"strings"
)

// Handler returns a slog.Handler that applies text to a record's message
// and to its string and error attributes (error, reason, last_error, ...),
// those of groups too, before h writes it.
func Handler(h slog.Handler, text func(string) string) slog.Handler {
	return handler{h, text}
}

type handler struct {
	h    slog.Handler
	text func(string) string
}

func (t handler) Enabled(ctx context.Context, l slog.Level) bool { return t.h.Enabled(ctx, l) }

func (t handler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, t.text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(t.attr(a))
		return true
	})
	return t.h.Handle(ctx, out)
}

func (t handler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = t.attr(a)
	}
	return handler{t.h.WithAttrs(out), t.text}
}

func (t handler) WithGroup(name string) slog.Handler {
	return handler{t.h.WithGroup(name), t.text}
}

// attr is a with its text translated: strings, errors (written as their
// text anyway) and the attributes of groups.
func (t handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, t.text(v.String()))
	case slog.KindGroup:
		as := v.Group()
		out := make([]any, len(as))
		for i, g := range as {
			out[i] = t.attr(g)
		}
		return slog.Group(a.Key, out...)
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			return slog.String(a.Key, t.text(err.Error()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// HTTP serves h with text applied to the bodies of /readyz (the relay's
// Health.Reason) and /metrics (the help of the series).
// Only text bodies are rewritten (a protobuf exposition is passed on as it
// is); they are asked for uncompressed.
func HTTP(h http.Handler, text func(string) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/readyz" && req.URL.Path != "/metrics" {
			h.ServeHTTP(w, req)
			return
		}
		req = req.Clone(req.Context())
		req.Header.Del("Accept-Encoding")
		rec := &recordedResponse{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, req)
		body := rec.body.Bytes()
		if textual(rec.header.Get("Content-Type")) && rec.header.Get("Content-Encoding") == "" {
			body = []byte(text(string(body)))
			rec.header.Del("Content-Length")
		}
		maps.Copy(w.Header(), rec.header)
		w.WriteHeader(rec.code)
		_, _ = w.Write(body)
	})
}

// textual reports whether a body of content type ct is text (JSON, the
// Prometheus and OpenMetrics text formats).
func textual(ct string) bool {
	return strings.HasPrefix(ct, "text/") || strings.HasPrefix(ct, "application/json") ||
		strings.HasPrefix(ct, "application/openmetrics-text")
}

// recordedResponse is a response held for rewriting.
type recordedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
	wrote  bool
}

func (r *recordedResponse) Header() http.Header { return r.header }

func (r *recordedResponse) WriteHeader(code int) {
	if !r.wrote {
		r.code, r.wrote = code, true
	}
}

func (r *recordedResponse) Write(p []byte) (int, error) {
	r.wrote = true
	return r.body.Write(p)
}
