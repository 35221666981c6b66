package report

import (
	"encoding/json"
	"io"

	"github.com/outbox-relay/outbox-relay/slot"
)

// Slot is `slot status`'s report of st: position, lag, WAL health and
// flags, under the names of pg_replication_slots.
func Slot(st slot.Status) map[string]any {
	return map[string]any{
		"slot": st.Name, "plugin": st.Plugin, "database": st.Database, "active": st.Active,
		"active_pid": st.ActivePID, "confirmed_flush_lsn": st.ConfirmedFlushLSN.String(),
		"restart_lsn": st.RestartLSN.String(), "wal_status": st.WALStatus, "safe_wal_size": st.SafeWALSize,
		"current_wal_lsn": st.CurrentLSN.String(), "lag_bytes": st.LagBytes, "retained_bytes": st.RetainedBytes,
		"failover": st.Failover,
	}
}

// Write prints a report as indented JSON, one object per command.
func Write(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
