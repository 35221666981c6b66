package publisher

import (
	"github.com/outbox-relay/outbox-relay/internal/topictemplate"
)

// TopicTemplate renders a topic name from an event's fields. Placeholders:
// {aggregate_type} and {event_type}. The default, outbox.event.{aggregate_type},
// is the Debezium outbox event router's.
//
// The rules are internal/topictemplate's, the one implementation, which
// the producer-side schema check (package outbox/outboxschema) shares
// without linking the publisher: it names subjects by the topic the relay
// will publish to.
type TopicTemplate struct {
	t topictemplate.Template
}

// DefaultTopicTemplate is the Debezium outbox router's default. A
// literal rather than internal/topictemplate's Default, so that the
// public API names no internal declaration; TestTopicTemplate keeps the
// two equal.
const DefaultTopicTemplate = "outbox.event.{aggregate_type}"

// ParseTopicTemplate validates a template.
func ParseTopicTemplate(s string) (TopicTemplate, error) {
	t, err := topictemplate.Parse(s)
	return TopicTemplate{t: t}, err
}

// Render returns the topic for an event.
func (t TopicTemplate) Render(aggregateType, eventType string) string {
	return t.t.Render(aggregateType, eventType)
}
