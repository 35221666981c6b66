package reconcile

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
)

func testReport(t *testing.T) Report {
	t.Helper()
	table, err := migrations.ParseTable("public.outbox")
	if err != nil {
		t.Fatal(err)
	}
	from := time.Date(2026, 12, 2, 17, 0, 0, 0, time.UTC)
	return Report{Table: table, From: from, To: from.Add(59*time.Minute + 30*time.Second), Since: time.Hour, Settle: 30 * time.Second, Records: 7}
}

func TestReportNothingMissing(t *testing.T) {
	r := testReport(t)
	r.Types = map[string]Counts{"order.confirmed": {Committed: 4, InKafka: 4}, "order.cancelled": {Committed: 3, InKafka: 3}}
	if err := r.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
	var b bytes.Buffer
	r.Write(&b)
	want := `reconcile: public.outbox, events committed 2026-12-02T17:00:00Z .. 2026-12-02T17:59:30Z (--since 1h0m0s, --settle 30s), 7 Kafka records read
event_type       committed  in_kafka  missing_kafka
order.cancelled  3          3         0
order.confirmed  4          4         0
TOTAL            7          7         0

reconcile: nothing missing
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestReportMissing(t *testing.T) {
	r := testReport(t)
	r.Consumer = "billing"
	r.Types = map[string]Counts{
		"order.confirmed": {Committed: 5, InKafka: 4, Processed: 2, DeadLettered: 1, NotConsumed: 1},
		"order.cancelled": {Committed: 2, InKafka: 1, Processed: 1},
	}
	created := time.Date(2026, 12, 2, 17, 10, 0, 0, time.FixedZone("CET", 3600))
	r.MissingKafka = []MissingEvent{
		{EventID: "e1", AggregateType: "order", AggregateID: "o-1", AggregateVersion: 3, EventType: "order.confirmed", CreatedAt: created},
		{EventID: "e2", AggregateType: "order", AggregateID: "o-2", AggregateVersion: 1, EventType: "order.cancelled", CreatedAt: created, DeadLetter: "dead"},
	}
	r.MissingConsumer = []UnconsumedEvent{{EventID: "e3", AggregateID: "o-3", AggregateVersion: 2, EventType: "order.confirmed"}}
	err := r.Err()
	if !errors.Is(err, ErrMissing) || err.Error() != "events are missing: 2 not in Kafka, 1 not processed by the consumer" {
		t.Fatalf("Err: %v", err)
	}
	var b bytes.Buffer
	r.Write(&b)
	want := `reconcile: public.outbox, events committed 2026-12-02T17:00:00Z .. 2026-12-02T17:59:30Z (--since 1h0m0s, --settle 30s), 7 Kafka records read
event_type       committed  in_kafka  missing_kafka  processed  dead_lettered  not_consumed
order.cancelled  2          1         1              1          0              0
order.confirmed  5          4         1              2          1              1
TOTAL            7          5         2              3          1              1

missing from Kafka: 2 (listing 2)
  e1  order o-1 v3  order.confirmed  committed 2026-12-02T16:10:00Z
  e2  order o-2 v1  order.cancelled  committed 2026-12-02T16:10:00Z  (relay dead-letter: dead)

in Kafka but not processed by consumer "billing": 1 (listing 1)
  e3  o-3 v2  order.confirmed

consumer "billing" dead-lettered 1 events (see its inbox_dead_letter table)
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

// A consumer's dead-lettered events are decided, not missing.
func TestReportDeadLetteredIsNotMissing(t *testing.T) {
	r := testReport(t)
	r.Consumer = "billing"
	r.Types = map[string]Counts{"a": {Committed: 2, InKafka: 2, Processed: 1, DeadLettered: 1}}
	if err := r.Err(); err != nil {
		t.Fatalf("Err: %v", err)
	}
}

func TestOutcomeOf(t *testing.T) {
	for st, want := range map[string]outcome{
		"processed": processed, "applied": processed,
		"dead": deadLettered, "parked": deadLettered, "discarded": deadLettered,
		"": notConsumed, "other": notConsumed,
	} {
		if got := outcomeOf(st); got != want {
			t.Errorf("outcomeOf(%q) = %d, want %d", st, got, want)
		}
	}
}
