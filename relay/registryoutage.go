package relay

// This file holds what /readyz says of a schema registry that does not
// answer (the registry record formats, issue 48). Such a stream ends with
// the slot position held and restarts after a backoff, so its window is
// empty most of the time and the stall detector, which needs events in
// flight, never fires: without this the probe would flap between ready
// and "reconnecting". No goroutine: the leading goroutine reports the
// outage (down), the observer clears it (observe), readiness reads it.

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// registryOutage is the current outage of the schema registry, if any.
type registryOutage struct {
	mu    sync.Mutex
	since time.Time // zero: no outage
	last  string
	// tracker is the window of the stream the outage ended: only a later
	// stream's acknowledgement shows the registry answering again.
	tracker *checkpoint.Tracker
}

// down records that the stream of tracker ended because the registry did
// not answer err.
func (o *registryOutage) down(err *publisher.SchemaUnavailableError, tracker *checkpoint.Tracker, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		o.since = now
	}
	o.last, o.tracker = err.Error(), tracker
}

// observe clears the outage once a later stream than the one it ended had
// an event acknowledged: the registry answered it.
func (o *registryOutage) observe(tracker *checkpoint.Tracker, acked int, log *slog.Logger, now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() || tracker == o.tracker || acked == 0 {
		return
	}
	log.Info("schema registry answers again: delivery resumed", slog.String("stage", "schema_registry"), slog.Duration("outage", now.Sub(o.since).Round(time.Millisecond)))
	o.since, o.last, o.tracker = time.Time{}, "", nil
}

// reason is the /readyz reason during an outage, empty otherwise.
func (o *registryOutage) reason(now time.Time) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.since.IsZero() {
		return ""
	}
	return fmt.Sprintf("schema registry unavailable for %s: events held, the slot position kept, nothing dead-lettered; last error: %s",
		now.Sub(o.since).Round(time.Second), o.last)
}
