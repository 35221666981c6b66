package topictemplate

import "testing"

// The rules themselves are tested through their public face,
// publisher.TopicTemplate (TestTopicTemplate); this covers what only this
// package promises.

// TestRenderAllocatesOnce: the schema check renders a topic per Append
// (BenchmarkAppendSchemaCheck counts on one allocation).
func TestRenderAllocatesOnce(t *testing.T) {
	tt, err := Parse("shop.{aggregate_type}.{event_type}")
	if err != nil {
		t.Fatal(err)
	}
	if got := tt.Render("order", "order.confirmed"); got != "shop.order.order.confirmed" {
		t.Fatalf("Render = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = tt.Render("order", "order.confirmed") }); n != 1 {
		t.Fatalf("Render allocates %v times, want 1", n)
	}
}

func TestIsZero(t *testing.T) {
	if !(Template{}).IsZero() {
		t.Error("the zero Template is not IsZero")
	}
	if tt, err := Parse("outbox.event.{aggregate_type}"); err != nil || tt.IsZero() {
		t.Errorf("Parse: %v, IsZero %v", err, tt.IsZero())
	}
}
