package relay

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/leader"
)

// Readiness is the relay's readiness, as /readyz reports it.
type Readiness struct {
	// Status is "ready" or "not_ready".
	Status string
	// Role is "leader", "standby", "connecting" (no working lock
	// connection yet) or "stopped" (Run returned; Reason says why).
	Role string
	// Streaming is true while a replication stream runs.
	Streaming bool
	// Stalled is true while events are in flight and none was
	// acknowledged for Window.StallTimeout; Reason then says for how long
	// and why.
	Stalled bool
	// Reason says why the relay is not ready.
	Reason string
	// LastContact is when the lock connection last answered (zero:
	// never).
	LastContact time.Time
}

// Readiness reports readiness: ready is a leader whose replication stream
// runs, or a standby whose lock connection answered within Leader.Timeout
// (it can take over). Anything else - starting up, a leader waiting for
// the slot or reconnecting, a leader whose delivery stalled, a standby cut
// off from PostgreSQL - is not ready.
func (r *Relay) Readiness() Readiness { return r.readiness(time.Now()) }

func (r *Relay) readiness(now time.Time) Readiness {
	h := Readiness{Status: "not_ready", Streaming: r.streaming.Load()}
	if why := r.stopped.Load(); why != nil {
		h.Role, h.Reason = "stopped", *why
		return h
	}
	st := r.elector.Status()
	h.Role, h.LastContact = st.Role.String(), st.LastContact
	stalled := r.stalls.reason()
	registry := r.registryOut.reason(now)
	switch {
	case st.Role == leader.RoleLeader && registry != "":
		// The stream restarts and ends at the first event it cannot
		// encode: neither "streaming" nor "reconnecting" says why.
		h.Reason = registry
	case st.Role == leader.RoleLeader && h.Streaming && stalled != "":
		// Streaming, but Kafka acknowledges nothing: once its window is
		// full the relay reads nothing either (stallwatch.go).
		h.Reason, h.Stalled = stalled, true
	case st.Role == leader.RoleLeader && h.Streaming:
		h.Status = "ready"
	case st.Role == leader.RoleLeader:
		h.Reason = "leader, replication stream not running (waiting for the slot or reconnecting)"
	case st.Role == leader.RoleStandby && !st.LastContact.IsZero() && now.Sub(st.LastContact) <= r.cfg.Leader.Timeout:
		h.Status = "ready"
	case st.Role == leader.RoleStandby:
		h.Reason = "standby, lock connection silent for longer than the leader timeout"
	default:
		h.Reason = "lock connection to PostgreSQL not established"
	}
	return h
}

// Handler serves the relay's probes and metrics, for mounting on the
// embedding service's own server (http.StripPrefix moves them under a
// prefix):
//
//   - /healthz, the liveness probe: 200 while the process serves HTTP. It
//     does not depend on PostgreSQL or Kafka, so an outage never gets a
//     healthy relay restarted (which would not help and loses its
//     in-flight window).
//   - /readyz, the readiness probe: Readiness as JSON, 200 when ready and 503
//     otherwise.
//   - /metrics, the outbox_relay_* series in the Prometheus exposition
//     format (see WithMetrics).
func (r *Relay) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeHealth(w, http.StatusOK, healthBody{Status: "alive", Streaming: r.streaming.Load()})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now()
		h := r.readiness(now)
		code := http.StatusOK
		if h.Status != "ready" {
			code = http.StatusServiceUnavailable
		}
		writeHealth(w, code, bodyOf(h, now))
	})
	if r.gatherer != nil {
		mux.Handle("/metrics", r.m.Handler(r.gatherer))
	}
	return mux
}

// healthBody is the JSON of /healthz and /readyz.
type healthBody struct {
	Status    string `json:"status"`
	Role      string `json:"role,omitempty"`
	Streaming bool   `json:"streaming"`
	// LastContactSeconds is the age of the lock connection's last answer.
	LastContactSeconds *float64 `json:"last_contact_seconds,omitempty"`
	Reason             string   `json:"reason,omitempty"`
	Stalled            bool     `json:"stalled,omitempty"`
}

func bodyOf(h Readiness, now time.Time) healthBody {
	b := healthBody{Status: h.Status, Role: h.Role, Streaming: h.Streaming, Reason: h.Reason, Stalled: h.Stalled}
	if !h.LastContact.IsZero() {
		age := now.Sub(h.LastContact).Seconds()
		b.LastContactSeconds = &age
	}
	return b
}

func writeHealth(w http.ResponseWriter, code int, b healthBody) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(b)
}
