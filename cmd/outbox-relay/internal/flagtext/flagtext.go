// Package flagtext shows library text in the binary's terms: the
// libraries name what their user can change by its Go field path
// ("exceeds Publish.MaxBatchBytes"), the binary's user has flags, so the
// binary passes that text through a translation (built from how its flags
// are bound) wherever it shows it: errors and its log records (Handler).
// The relay's /readyz and /metrics are never rewritten: their texts name
// no configuration field.
package flagtext

import (
	"context"
	"log/slog"
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
