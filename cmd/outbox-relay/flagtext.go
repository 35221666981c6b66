package main

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"maps"
	"net/http"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// The libraries name what their user can change by its Go field path in
// relay.Config ("record of 2000000 bytes exceeds Publish.MaxBatchBytes"):
// an embedder has no flags. The binary's user has nothing but flags, so
// wherever the binary shows library text - the errors run prints, the log
// records of every library (newLogger's handler), /readyz's reason and the
// metrics' help (runRelay) - it names the flags instead, through flagText.
//
// The table from field paths to flags is derived from how the flags are
// bound (envflag.Binder.Fields: a flag's path is that of the field its
// pointer points to), plus kafkaSecurityFields for what the messages name
// inside Kafka.TLS and Kafka.SASL, which the binary builds from several
// flags.

// kafkaSecurityFields map what library messages name inside relay.Config's
// Kafka.TLS (a *tls.Config: its fields' own Go paths) and Kafka.SASL (a
// sasl.Mechanism: what it is built from) to the fields of config.KafkaConn
// (kafkaconn.Config) whose flags build them.
var kafkaSecurityFields = map[string][]string{
	"Kafka.TLS":                    {"TLS.Enabled"},
	"Kafka.TLS.RootCAs":            {"TLS.CAFile"},
	"Kafka.TLS.Certificates":       {"TLS.CertFile", "TLS.KeyFile"},
	"Kafka.TLS.ServerName":         {"TLS.ServerName"},
	"Kafka.TLS.InsecureSkipVerify": {"TLS.InsecureSkipVerify"},
	"Kafka.SASL":                   {"SASL.Mechanism", "SASL.Username", "SASL.Password"},
	"Kafka.SASL.Mechanism":         {"SASL.Mechanism"},
	"Kafka.SASL.Username":          {"SASL.Username"},
	"Kafka.SASL.Password":          {"SASL.Password"},
}

// flagNames is the table from field paths to the flags that set them, for
// a command whose flags b registered: b's own (the relay's fields, and the
// options of its own flags such as cleanup's Options.OlderThan), those of
// the relay's fields it lacks from run's flags (cleanup names
// Checkpoints.Interval, migrate Cleanup.OlderThan: run's settings), and
// kafkaSecurityFields.
func flagNames(b *envflag.Binder) map[string]string {
	var all config
	run := envflag.Listing(flag.NewFlagSet("run", flag.ContinueOnError), envPrefix)
	all.bind(run, scopeDB|scopeKafka|scopeRun)
	names := run.FlagNames()
	maps.Copy(names, b.FlagNames())
	for field, conn := range kafkaSecurityFields {
		var flags []string
		for _, f := range conn {
			if name, ok := names[kafkaConnPrefix+f]; ok {
				flags = append(flags, name)
			}
		}
		if len(flags) == len(conn) {
			names[field] = andList(flags)
		}
	}
	return names
}

// andList joins "a", "b" and "c" as "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// flagTextSink is implemented by run's stderr (cliStderr): parseWith gives
// it the command's flagText, for the errors run prints.
type flagTextSink interface{ setFlagText(func(string) string) }

// text is c.flagText, or nothing to translate before the flags are
// parsed.
func (c *config) text(s string) string {
	if c == nil || c.flagText == nil {
		return s
	}
	return c.flagText(s)
}

// flagTextHandler is a slog.Handler that names configuration fields by
// their flags in a record's message and in its string and error
// attributes (error, reason, last_error, ...), before h writes it.
type flagTextHandler struct {
	h    slog.Handler
	text func(string) string
}

func (t flagTextHandler) Enabled(ctx context.Context, l slog.Level) bool { return t.h.Enabled(ctx, l) }

func (t flagTextHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, t.text(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(t.attr(a))
		return true
	})
	return t.h.Handle(ctx, out)
}

func (t flagTextHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = t.attr(a)
	}
	return flagTextHandler{t.h.WithAttrs(out), t.text}
}

func (t flagTextHandler) WithGroup(name string) slog.Handler {
	return flagTextHandler{t.h.WithGroup(name), t.text}
}

// attr is a with its text translated: strings, errors (written as their
// text anyway) and the attributes of groups.
func (t flagTextHandler) attr(a slog.Attr) slog.Attr {
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

// flagTextHTTP serves h with the library text of /readyz (the relay's
// Health.Reason) and of /metrics (the help of the series) in flag terms.
// Only text bodies are rewritten (a protobuf exposition is passed on as it
// is); they are asked for uncompressed.
func flagTextHTTP(h http.Handler, text func(string) string) http.Handler {
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
