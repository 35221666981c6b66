package topictemplate_test

import (
	"fmt"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/topictemplate"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// TestAgreesWithPublisher: the producer's check renders the topic the
// relay publishes to, and refuses the templates the relay refuses, with
// the same words.
func TestAgreesWithPublisher(t *testing.T) {
	if topictemplate.Default != publisher.DefaultTopicTemplate {
		t.Errorf("Default = %q, publisher's is %q", topictemplate.Default, publisher.DefaultTopicTemplate)
	}
	events := [][2]string{{"order", "order.confirmed"}, {"", ""}, {"a b", "ü"}}
	for _, s := range []string{
		topictemplate.Default, "orders", "{event_type}", "x.{aggregate_type}.{event_type}.y", "{aggregate_type}{aggregate_type}",
		"", "{", "a{b}", "{aggregate_type", "__x.{aggregate_type}", "bad topic", "{event_type}}",
	} {
		got, gerr := topictemplate.Parse(s)
		want, werr := publisher.ParseTopicTemplate(s)
		if fmt.Sprint(gerr) != fmt.Sprint(werr) {
			t.Errorf("Parse(%q) = %v, publisher's %v", s, gerr, werr)
			continue
		}
		if gerr != nil {
			continue
		}
		for _, e := range events {
			if g, w := got.Render(e[0], e[1]), want.Render(e[0], e[1]); g != w {
				t.Errorf("%q.Render(%q, %q) = %q, publisher's %q", s, e[0], e[1], g, w)
			}
		}
	}
}
