// Package topictemplate is the relay's topic template: the rules that
// render an event's Kafka topic from its aggregate and event types. It is
// the one implementation; publisher.TopicTemplate and ParseTopicTemplate
// are built on it, and code that must know the topic the relay will pick
// without linking the publisher uses it directly: the producer-side
// schema check (package outbox/outboxschema) names a subject by it
// (issue 48).
package topictemplate

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/record"
)

// Template renders a topic name from an event's fields. Placeholders:
// {aggregate_type} and {event_type}.
type Template struct {
	parts []string // literal, placeholder, literal, ...
}

// Parse validates a template as the relay does; "" is not Default here
// (the caller decides what empty means).
func Parse(s string) (Template, error) {
	var t Template
	rest := s
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, rest)
			break
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return t, fmt.Errorf("topic template %q: unclosed '{'", s)
		}
		name := rest[i+1 : i+j]
		if name != "aggregate_type" && name != "event_type" {
			return t, fmt.Errorf("topic template %q: unknown placeholder {%s}; use {aggregate_type} or {event_type}", s, name)
		}
		t.parts = append(t.parts, rest[:i], name)
		rest = rest[i+j+1:]
	}
	if err := record.ValidTopic(t.Render("x", "x")); err != nil {
		return t, fmt.Errorf("topic template %q: %w", s, err)
	}
	if strings.HasPrefix(t.parts[0], "__") {
		return t, fmt.Errorf(`topic template %q: topics that begin with "__" are Kafka's internal topics and the relay's positions topic; start it with another prefix`, s)
	}
	return t, nil
}

// IsZero reports whether t is the zero Template, not one Parse returned
// (which has at least one part).
func (t Template) IsZero() bool { return t.parts == nil }

// Render returns the topic for an event.
func (t Template) Render(aggregateType, eventType string) string {
	if len(t.parts) == 1 {
		return t.parts[0]
	}
	var b strings.Builder
	n := 0
	for i, p := range t.parts {
		switch {
		case i%2 == 0:
			n += len(p)
		case p == "aggregate_type":
			n += len(aggregateType)
		default:
			n += len(eventType)
		}
	}
	b.Grow(n) // one allocation
	for i, p := range t.parts {
		switch {
		case i%2 == 0:
			b.WriteString(p)
		case p == "aggregate_type":
			b.WriteString(aggregateType)
		default:
			b.WriteString(eventType)
		}
	}
	return b.String()
}
