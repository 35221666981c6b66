package reconcile

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// ErrMissing is Report.Err's error: the comparison found missing events
// (the binary exits 3 on it, apart from failures to compare).
var ErrMissing = errors.New("events are missing")

// Counts are the results of one event type (or the total).
type Counts struct {
	// Committed events of the window, InKafka of them carried by a record.
	Committed, InKafka int64
	// With a consumer: of the events in Kafka, how many it processed,
	// dead-lettered, or neither.
	Processed, DeadLettered, NotConsumed int64
}

// NotInKafka is the number of committed events no record carries.
func (c Counts) NotInKafka() int64 { return c.Committed - c.InKafka }

func (c *Counts) add(o Counts) {
	c.Committed += o.Committed
	c.InKafka += o.InKafka
	c.Processed += o.Processed
	c.DeadLettered += o.DeadLettered
	c.NotConsumed += o.NotConsumed
}

// Report is the outcome of a Run.
type Report struct {
	Table migrations.Table
	// From and To bound the window's created_at (the database's clock);
	// Since and Settle are the durations they were computed from.
	From, To      time.Time
	Since, Settle time.Duration
	// Records is how many Kafka records were read.
	Records int64
	// Consumer is the consumer checked ("" when none was).
	Consumer string
	// Types are the counts per event type.
	Types map[string]Counts
	// MissingKafka and MissingConsumer list up to Config.MaxList of the
	// events missing from Kafka, and in Kafka but not consumed.
	MissingKafka    []MissingEvent
	MissingConsumer []UnconsumedEvent
}

// Total sums the counts of every event type.
func (r Report) Total() Counts {
	var t Counts
	for _, c := range r.Types {
		t.add(c)
	}
	return t
}

// Err is nil when nothing is missing, otherwise ErrMissing with the counts.
// Dead-lettered events are not missing: the consumer decided about them.
func (r Report) Err() error {
	t := r.Total()
	if t.NotInKafka() > 0 || t.NotConsumed > 0 {
		return fmt.Errorf("%w: %d not in Kafka, %d not processed by the consumer", ErrMissing, t.NotInKafka(), t.NotConsumed)
	}
	return nil
}

// Write prints the report: the window, a table of counts per event type,
// then the missing events.
func (r Report) Write(w io.Writer) {
	fmt.Fprintf(w, "reconcile: %s, events committed %s .. %s (--since %s, --settle %s), %d Kafka records read\n",
		r.Table, r.From.UTC().Format(time.RFC3339), r.To.UTC().Format(time.RFC3339), r.Since, r.Settle, r.Records)
	types := make([]string, 0, len(r.Types))
	for t := range r.Types {
		types = append(types, t)
	}
	sort.Strings(types)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	head := "event_type\tcommitted\tin_kafka\tmissing_kafka"
	if r.Consumer != "" {
		head += "\tprocessed\tdead_lettered\tnot_consumed"
	}
	fmt.Fprintln(tw, head)
	line := func(name string, c Counts) {
		s := fmt.Sprintf("%s\t%d\t%d\t%d", name, c.Committed, c.InKafka, c.NotInKafka())
		if r.Consumer != "" {
			s += fmt.Sprintf("\t%d\t%d\t%d", c.Processed, c.DeadLettered, c.NotConsumed)
		}
		fmt.Fprintln(tw, s)
	}
	for _, t := range types {
		line(t, r.Types[t])
	}
	total := r.Total()
	line("TOTAL", total)
	tw.Flush()
	if lost := total.NotInKafka(); lost > 0 {
		fmt.Fprintf(w, "\nmissing from Kafka: %d (listing %d)\n", lost, len(r.MissingKafka))
		for _, e := range r.MissingKafka {
			fmt.Fprintln(w, "  "+e.String())
		}
	}
	if total.NotConsumed > 0 {
		fmt.Fprintf(w, "\nin Kafka but not processed by consumer %q: %d (listing %d)\n", r.Consumer, total.NotConsumed, len(r.MissingConsumer))
		for _, e := range r.MissingConsumer {
			fmt.Fprintln(w, "  "+e.String())
		}
	}
	if total.DeadLettered > 0 {
		fmt.Fprintf(w, "\nconsumer %q dead-lettered %d events (see its inbox_dead_letter table)\n", r.Consumer, total.DeadLettered)
	}
	if r.Err() == nil {
		fmt.Fprintln(w, "\nreconcile: nothing missing")
	}
}
