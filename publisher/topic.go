package publisher

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/record"
)

// TopicTemplate renders a topic name from an event's fields. Placeholders:
// {aggregate_type} and {event_type}. The default, outbox.event.{aggregate_type},
// is the Debezium outbox event router's.
type TopicTemplate struct {
	parts []string // literal, placeholder, literal, ...
}

// DefaultTopicTemplate is the Debezium outbox router's default.
const DefaultTopicTemplate = "outbox.event.{aggregate_type}"

// ParseTopicTemplate validates a template.
func ParseTopicTemplate(s string) (TopicTemplate, error) {
	var t TopicTemplate
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

// Render returns the topic for an event.
func (t TopicTemplate) Render(aggregateType, eventType string) string {
	if len(t.parts) == 1 {
		return t.parts[0]
	}
	var b strings.Builder
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
