package relay

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestRegistryOutageReadiness: a stream ended by a registry that does not
// answer makes /readyz say so until a later stream had an event
// acknowledged; the ended stream's own acknowledgements, and a later
// stream's empty window, do not clear it.
func TestRegistryOutageReadiness(t *testing.T) {
	var o registryOutage
	log := slog.New(slog.DiscardHandler)
	t0 := time.Unix(1000, 0)
	ended := checkpoint.New(0, checkpoint.Limits{MaxEvents: 10, MaxBytes: 1 << 20})
	if r := o.reason(t0); r != "" {
		t.Fatalf("no outage yet: %q", r)
	}
	o.down(&publisher.SchemaUnavailableError{EventID: "e1", Ref: record.SchemaRef{Subject: "orders-value", Version: "2"}, Err: errors.New("connection refused")}, ended, t0)
	if r := o.reason(t0.Add(5 * time.Second)); !strings.Contains(r, "schema registry unavailable for 5s") || !strings.Contains(r, "connection refused") {
		t.Fatalf("during the outage: %q", r)
	}
	o.observe(ended, 3, log, t0.Add(6*time.Second)) // the ended stream's acks came before
	next := checkpoint.New(0, checkpoint.Limits{MaxEvents: 10, MaxBytes: 1 << 20})
	o.observe(next, 0, log, t0.Add(7*time.Second)) // restarted, nothing acknowledged yet
	if o.reason(t0.Add(8*time.Second)) == "" {
		t.Fatal("cleared before a later stream had an event acknowledged")
	}
	o.down(&publisher.SchemaUnavailableError{Err: errors.New("timeout")}, next, t0.Add(9*time.Second))
	if r := o.reason(t0.Add(10 * time.Second)); !strings.Contains(r, "for 10s") || !strings.Contains(r, "timeout") {
		t.Fatalf("a second failure keeps the outage's start and the last error: %q", r)
	}
	last := checkpoint.New(0, checkpoint.Limits{MaxEvents: 10, MaxBytes: 1 << 20})
	o.observe(last, 1, log, t0.Add(11*time.Second))
	if r := o.reason(t0.Add(12 * time.Second)); r != "" {
		t.Fatalf("after an acknowledgement on a later stream: %q", r)
	}
}
