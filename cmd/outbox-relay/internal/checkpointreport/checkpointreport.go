// Package checkpointreport is what `outbox-relay checkpoint show` reports
// about a saved checkpoint: its fields, and whether the relay would apply
// it on the server it now connects to.
package checkpointreport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/replication"
)

// Usable identifies the server on a replication connection and
// reports in out whether cp applies there, as the relay decides it
// (checkpoint.Store.Resume): saved on the server's system and timeline, or
// on an earlier timeline of the same system (a promoted standby) at or
// before where that timeline ended.
func Usable(ctx context.Context, url string, opts []replication.Option, cp checkpoint.Checkpoint, out map[string]any) error {
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

// JSON is cp as `checkpoint show` prints it, with its age.
func JSON(cp checkpoint.Checkpoint) map[string]any {
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
