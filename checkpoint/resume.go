package checkpoint

import (
	"context"
	"errors"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// Resumption is where a relay starting on a slot stands (Store.Resume).
type Resumption struct {
	// Prev is the newest checkpoint as it reads on the server's timeline;
	// nil when none was saved or it diverged. One of an ancestor timeline
	// keeps only what the timelines share: its Decoded is limited to
	// Lineage.End, and a Partial of a transaction that commits at or past
	// Lineage.End is dropped (that commit LSN names another transaction
	// here). A Saver continues from Prev.
	Prev *Checkpoint
	// SkipBefore is Prev's LSN when it is ahead of the slot, 0 otherwise:
	// transactions that commit before it were acknowledged by Kafka
	// already (the relay crashed before confirming them, PostgreSQL lost
	// the slot's in-memory position, or a synchronized slot lagged the
	// primary's), so they may be skipped instead of re-published.
	SkipBefore pglogrepl.LSN
	// Lineage relates the newest checkpoint to the server's timeline.
	Lineage Lineage
	// Diverged is the newest checkpoint when it was saved on an ancestor
	// timeline past Lineage.End: the relay confirmed WAL that the promoted
	// standby never received (possible without synchronized_standby_slots).
	// Its position names other WAL here, so nothing is skipped by it: the
	// relay resumes from the slot's position (duplicates, never loss), and
	// events past Lineage.End may have been published from the old primary
	// although this timeline lacks them. The relay logs it.
	Diverged *Checkpoint
}

// Resume decides where a relay starting on a slot confirmed at confirmed
// stands, on the server identified as id whose WAL ends at walEnd (0:
// unknown). conn is a replication connection to it: the timeline history
// is read there when the newest checkpoint was saved on an earlier
// timeline of the same system (Checkpoint.Trace). A checkpoint of another
// system, or of a timeline the server's does not descend from, is a
// *MismatchError; one of the server's own history past its WAL end is an
// *AheadError.
func (s *Store) Resume(ctx context.Context, conn *pgconn.PgConn, id Identity, confirmed, walEnd pglogrepl.LSN) (Resumption, error) {
	cp, err := s.Latest(ctx)
	if errors.Is(err, ErrCheckpointNotFound) {
		return Resumption{}, nil
	}
	if err != nil {
		return Resumption{}, err
	}
	lin, err := cp.Trace(ctx, conn, id)
	if err != nil {
		return Resumption{}, err
	}
	return resumeAt(cp, lin, confirmed, walEnd)
}

// resumeAt is Resume once the newest checkpoint cp is related to the
// server by lin.
func resumeAt(cp Checkpoint, lin Lineage, confirmed, walEnd pglogrepl.LSN) (Resumption, error) {
	r := Resumption{Lineage: lin}
	if !lin.Shares(cp.LSN) {
		r.Diverged = &cp
		return r, nil
	}
	if walEnd != 0 && cp.LSN > walEnd {
		return Resumption{}, &AheadError{Slot: cp.Slot, LSN: cp.LSN, WAL: walEnd}
	}
	if lin.Ancestor {
		cp.Decoded = min(cp.Decoded, lin.End)
		if !cp.Partial.Empty() && cp.Partial.CommitLSN >= lin.End {
			cp.Partial = Partial{}
		}
	}
	r.Prev = &cp
	if cp.LSN > confirmed {
		r.SkipBefore = cp.LSN
	}
	return r, nil
}
