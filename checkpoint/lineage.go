package checkpoint

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Lineage is how a checkpoint's timeline relates to the server's, once
// the system identifiers match (Checkpoint.Lineage, Checkpoint.Trace).
type Lineage struct {
	// Ancestor is set when the checkpoint was saved on an earlier
	// timeline the server's descends from: the server is a promoted
	// standby, or a point-in-time restore, of the cluster that saved it.
	Ancestor bool
	// Timeline is the checkpoint's timeline (Ancestor only).
	Timeline int32
	// End is where the checkpoint's timeline stops sharing WAL with the
	// server's (History.End; Ancestor only): positions up to it name the
	// same WAL on both, and transaction ids before it are the same
	// transactions (a physical replica replays the primary's WAL).
	End pglogrepl.LSN
}

// Shares reports whether position lsn of the checkpoint's timeline names
// the same WAL on the server's: always on the same timeline, up to End on
// an ancestor.
func (l Lineage) Shares(lsn pglogrepl.LSN) bool {
	return !l.Ancestor || lsn <= l.End
}

// Lineage relates cp to the server identified by id whose timeline's
// history is h. A checkpoint of id itself needs no history (h may be
// zero). One of another system identifier, or of a timeline that is not
// among h's ancestors (a sibling branch, a later timeline, or any other
// timeline when h is zero), is a *MismatchError: its LSN names other WAL
// here. A checkpoint of an ancestor timeline is related, not accepted:
// only what is at or before Lineage.End applies here (see the package
// documentation for what the relay and recover do with the rest).
func (cp Checkpoint) Lineage(id Identity, h History) (Lineage, error) {
	if cp.Identity == id {
		return Lineage{}, nil
	}
	mismatch := &MismatchError{Slot: cp.Slot, Saved: cp.Identity, Current: id}
	if cp.Identity.SystemID != id.SystemID || h.Timeline == 0 {
		return Lineage{}, mismatch
	}
	if h.Timeline != id.Timeline {
		return Lineage{}, fmt.Errorf("checkpoint of slot %q: the history read is of timeline %d, the server is on %s", cp.Slot, h.Timeline, id)
	}
	end, ok := h.End(cp.Identity.Timeline)
	if !ok {
		return Lineage{}, mismatch
	}
	return Lineage{Ancestor: true, Timeline: cp.Identity.Timeline, End: end}, nil
}

// Trace is Lineage with the history read on conn, a replication
// connection to the server identified as id. The history is read only
// when it decides something: cp saved on an earlier timeline of the same
// system. Other checkpoints cost no round trip.
func (cp Checkpoint) Trace(ctx context.Context, conn *pgconn.PgConn, id Identity) (Lineage, error) {
	if cp.Identity.SystemID != id.SystemID || cp.Identity.Timeline < 1 || cp.Identity.Timeline >= id.Timeline {
		return cp.Lineage(id, History{})
	}
	h, err := ReadHistory(ctx, conn, id.Timeline)
	if err != nil {
		return Lineage{}, fmt.Errorf("checkpoint of slot %q was saved on %s, the server is on timeline %d: %w", cp.Slot, cp.Identity, id.Timeline, err)
	}
	return cp.Lineage(id, h)
}
