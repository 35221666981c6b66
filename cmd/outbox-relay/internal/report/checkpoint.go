// Package report is what the binary's inspection commands print: `slot
// status`'s view of the slot, and `checkpoint show`'s of the newest saved
// checkpoint (its fields, whether the relay would apply it on the server it
// now connects to, and how it stands to the slot), each as one JSON object.
package report

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// Checkpoint is `checkpoint show`'s report of cp, the slot's newest
// checkpoint: its fields (checkpointJSON), whether it applies on the
// server at url (usable), and how far ahead of the slot m manages it is.
func Checkpoint(ctx context.Context, cp checkpoint.Checkpoint, m *slot.Manager, url string, opts []replication.Option) (map[string]any, error) {
	out := checkpointJSON(cp)
	if err := usable(ctx, url, opts, cp, out); err != nil {
		return nil, err
	}
	st, err := m.Status(ctx)
	switch {
	case errors.Is(err, slot.ErrSlotNotFound):
		out["slot_exists"] = false
	case err != nil:
		return nil, err
	default:
		out["slot_exists"] = true
		out["slot_confirmed_flush_lsn"] = st.ConfirmedFlushLSN.String()
		out["slot_wal_status"] = st.WALStatus
		out["ahead_of_slot_bytes"] = int64(cp.LSN) - int64(st.ConfirmedFlushLSN)
	}
	return out, nil
}

// usable identifies the server on a replication connection and
// reports in out whether cp applies there, as the relay decides it
// (checkpoint.Store.Resume): saved on the server's system and timeline, or
// on an earlier timeline of the same system (a promoted standby) at or
// before where that timeline ended.
func usable(ctx context.Context, url string, opts []replication.Option, cp checkpoint.Checkpoint, out map[string]any) error {
	conn, err := replication.Connect(ctx, url, opts...)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	id, _, err := checkpoint.Identify(ctx, conn)
	if err != nil {
		return err
	}
	out["server_system_identifier"] = id.SystemID
	out["server_timeline"] = id.Timeline
	lin, err := cp.Trace(ctx, conn, id)
	var mismatch *checkpoint.MismatchError
	switch {
	case errors.As(err, &mismatch):
		out["usable"] = false
		out["refused"] = err.Error()
		return nil
	case err != nil:
		return err
	}
	out["usable"] = lin.Shares(cp.LSN)
	if !lin.Ancestor {
		return nil
	}
	out["timeline_switch_lsn"] = lin.End.String()
	if lin.Shares(cp.LSN) {
		out["lineage"] = fmt.Sprintf("promoted standby of the same cluster: saved on timeline %d, which this server's timeline %d descends from, "+
			"before that timeline ended at %s: it applies", lin.Timeline, id.Timeline, lin.End)
		return nil
	}
	out["lineage"] = fmt.Sprintf("promoted standby of the same cluster, but saved past the point where timeline %d ended (%s): "+
		"the relay resumes from the slot's position without skipping (duplicates, never loss); events committed past %s "+
		"may have been published from the old primary although this timeline lacks them", lin.Timeline, lin.End, lin.End)
	return nil
}

// checkpointJSON is cp's fields as `checkpoint show` prints them, with
// its age.
func checkpointJSON(cp checkpoint.Checkpoint) map[string]any {
	m := map[string]any{
		"outbox_table": cp.OutboxTable, "slot": cp.Slot, "lsn": cp.LSN.String(),
		"system_identifier": cp.Identity.SystemID, "timeline": cp.Identity.Timeline,
		"started_at": cp.StartedAt, "saved_at": cp.SavedAt, "age_seconds": time.Since(cp.SavedAt).Seconds(),
	}
	if !cp.CommitTime.IsZero() {
		m["commit_time"] = cp.CommitTime
	}
	if cp.Xid != 0 {
		m["xid"] = cp.Xid
	}
	if f := cp.Fence; f != nil {
		m["fence"] = map[string]any{"lsn": f.LSN.String(), "xmin": f.Xmin, "xmax": f.Xmax, "at": f.At}
	}
	if p := cp.Partial; !p.Empty() {
		m["partial"] = map[string]any{"commit_lsn": p.CommitLSN.String(), "events": p.Events, "acked_past": p.Known() - p.Events}
	}
	return m
}
