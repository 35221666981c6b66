// Package flagtext names the flags behind the configuration fields
// library log records mention. The libraries name what their user can
// change by its Go field path ("exceeds Publish.MaxBatchBytes"): an
// embedder has no flags. The binary's logs keep that text as the
// libraries wrote it - a record reads the same in the binary and in an
// embedding program, and a log pipeline matching it sees one text - and
// carry the fields it names, with their flags, as an attribute:
//
//	{"message":"delivery stalled: ... for Window.StallTimeout", ...,
//	 "flags":{"Window.StallTimeout":"--stall-timeout"}}
//
// Only the binary's own answers translate the text (a configuration
// error, the line a failed command ends with, what dlq and doctor
// print). /readyz and /metrics are served as the relay writes them.
package flagtext

import (
	"context"
	"log/slog"
	"maps"
	"slices"
)

// Handler returns a slog.Handler that writes each record through h with
// an attribute "flags": the fields its message and its string and error
// attributes (error, reason, last_error, ... and those of groups and of
// With) name, each with its flag, as find reports them. A record that
// names none is written as it is.
func Handler(h slog.Handler, find func(string) map[string]string) slog.Handler {
	return handler{h: h, find: find}
}

type handler struct {
	h    slog.Handler
	find func(string) map[string]string
	// with are the flags the attributes added with With name.
	with map[string]string
}

func (t handler) Enabled(ctx context.Context, l slog.Level) bool { return t.h.Enabled(ctx, l) }

func (t handler) Handle(ctx context.Context, r slog.Record) error {
	flags := maps.Clone(t.with)
	add := func(text string) {
		for field, flag := range t.find(text) {
			if flags == nil {
				flags = map[string]string{}
			}
			flags[field] = flag
		}
	}
	add(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		texts(a, add)
		return true
	})
	if len(flags) > 0 {
		r = r.Clone()
		attrs := make([]any, 0, len(flags))
		for _, field := range slices.Sorted(maps.Keys(flags)) {
			attrs = append(attrs, slog.String(field, flags[field]))
		}
		r.AddAttrs(slog.Group("flags", attrs...))
	}
	return t.h.Handle(ctx, r)
}

func (t handler) WithAttrs(as []slog.Attr) slog.Handler {
	with := maps.Clone(t.with)
	for _, a := range as {
		texts(a, func(text string) {
			for field, flag := range t.find(text) {
				if with == nil {
					with = map[string]string{}
				}
				with[field] = flag
			}
		})
	}
	return handler{h: t.h.WithAttrs(as), find: t.find, with: with}
}

func (t handler) WithGroup(name string) slog.Handler {
	return handler{h: t.h.WithGroup(name), find: t.find, with: t.with}
}

// texts calls f with the text of a string or error attribute, and of those
// of a group.
func texts(a slog.Attr, f func(string)) {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		f(v.String())
	case slog.KindGroup:
		for _, g := range v.Group() {
			texts(g, f)
		}
	case slog.KindAny:
		if err, ok := v.Any().(error); ok && err != nil {
			f(err.Error())
		}
	}
}
