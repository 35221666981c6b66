package main

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/leader"
)

// health is the body of /healthz and /readyz.
type health struct {
	Status    string `json:"status"`
	Role      string `json:"role,omitempty"`
	Streaming bool   `json:"streaming"`
	// LastContactSeconds is the age of the lock connection's last answer.
	LastContactSeconds *float64 `json:"last_contact_seconds,omitempty"`
	Reason             string   `json:"reason,omitempty"`
	// Stalled is true while events are in flight and none was acknowledged
	// for --stall-timeout; Reason then says for how long and why.
	Stalled bool `json:"stalled,omitempty"`
}

// healthz is the liveness probe: the process runs and serves HTTP. It does
// not depend on PostgreSQL or Kafka, so an outage never gets a healthy
// relay restarted (which would not help and loses its in-flight window).
func (r *relay) healthz(w http.ResponseWriter, _ *http.Request) {
	writeHealth(w, http.StatusOK, health{Status: "alive", Streaming: r.streaming.Load()})
}

// readyz is the readiness probe: ready is a leader whose replication stream
// runs, or a standby whose lock connection answered within the leader
// timeout (it can take over). Anything else — starting up, a leader waiting
// for the slot or reconnecting, a leader whose delivery stalled (no
// acknowledgement for --stall-timeout), a standby cut off from PostgreSQL —
// is 503.
func (r *relay) readyz(w http.ResponseWriter, _ *http.Request) {
	h := r.readiness(time.Now())
	code := http.StatusOK
	if h.Status != "ready" {
		code = http.StatusServiceUnavailable
	}
	writeHealth(w, code, h)
}

func (r *relay) readiness(now time.Time) health {
	h := health{Status: "not_ready", Streaming: r.streaming.Load()}
	if r.elector == nil {
		h.Reason = "starting up"
		return h
	}
	st := r.elector.Status()
	h.Role = st.Role.String()
	if !st.LastContact.IsZero() {
		age := now.Sub(st.LastContact).Seconds()
		h.LastContactSeconds = &age
	}
	stalled := ""
	if r.stalls != nil {
		stalled = r.stalls.reason()
	}
	switch {
	case st.Role == leader.RoleLeader && h.Streaming && stalled != "":
		// Streaming, but Kafka acknowledges nothing: once its window is
		// full the relay reads nothing either (stallwatch.go).
		h.Reason, h.Stalled = stalled, true
	case st.Role == leader.RoleLeader && h.Streaming:
		h.Status = "ready"
	case st.Role == leader.RoleLeader:
		h.Reason = "leader, replication stream not running (waiting for the slot or reconnecting)"
	case st.Role == leader.RoleStandby && !st.LastContact.IsZero() && now.Sub(st.LastContact) <= r.cfg.LeaderTimeout:
		h.Status = "ready"
	case st.Role == leader.RoleStandby:
		h.Reason = "standby, lock connection silent for longer than --leader-timeout"
	default:
		h.Reason = "lock connection to PostgreSQL not established"
	}
	return h
}

func writeHealth(w http.ResponseWriter, code int, h health) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(h)
}
