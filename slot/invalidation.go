package slot

import (
	"context"
	"fmt"
)

// Values of pg_replication_slots.invalidation_reason (PostgreSQL 17+): why
// the server invalidated a slot, which then shows wal_status = lost.
// PostgreSQL 15 and 16 have no such column; there a slot on a primary is
// invalidated only when max_slot_wal_keep_size removes its WAL.
const (
	// ReasonWALRemoved: WAL the slot needed was removed (max_slot_wal_keep_size).
	ReasonWALRemoved = "wal_removed"
	// ReasonIdleTimeout (18+): the slot was inactive longer than
	// idle_replication_slot_timeout. Its restart_lsn is kept, but the
	// server no longer retains WAL for it and refuses to decode from it.
	ReasonIdleTimeout = "idle_timeout"
	// ReasonRowsRemoved: catalog rows the slot needed were vacuumed away.
	// It happens to a slot on a standby, e.g. one synchronized for
	// failover, when hot_standby_feedback or primary_slot_name is missing;
	// after promotion the relay finds the slot invalidated.
	ReasonRowsRemoved = "rows_removed"
	// ReasonWALLevelInsufficient: a slot on a standby whose primary runs
	// with wal_level below logical.
	ReasonWALLevelInsufficient = "wal_level_insufficient"
)

// invalidationReason reads the slot's invalidation_reason. The column
// exists from PostgreSQL 17 on; reading it through to_jsonb keeps one
// query for every version (NULL, so "", before 17). Status asks only for
// a lost slot: the reason is for the error, not for the hot path.
func (m *Manager) invalidationReason(ctx context.Context) (string, error) {
	var reason *string
	err := m.db.QueryRow(ctx, `SELECT to_jsonb(s) ->> 'invalidation_reason' FROM pg_replication_slots s WHERE slot_name = $1`, m.slot).
		Scan(&reason)
	if err != nil {
		return "", fmt.Errorf("read invalidation_reason of slot %q: %w", m.slot, err)
	}
	return deref(reason), nil
}

// LostError reports an invalidated slot (wal_status = lost, or on a
// standby conflicting = true): it can never resume, and the WAL it no
// longer has may have held events. On PostgreSQL 17+ the message names
// invalidation_reason and gives the fix for that cause. PostgreSQL 16 has
// no reason, says conflicting = true for every invalidated logical slot
// and wal_status = lost for most, but clears restart_lsn only when it
// removed the slot's WAL: a conflicting slot that kept restart_lsn
// conflicted with recovery. Before 16 a lost slot is the
// max_slot_wal_keep_size case, the only one there.
func (s Status) LostError() error {
	if s.WALStatus != "lost" && !s.Conflicting {
		return nil
	}
	if s.InvalidationReason == "" && s.Conflicting && (s.WALStatus != "lost" || s.RestartLSN != 0) {
		cause, fix := lostCause(ReasonRowsRemoved)
		return fmt.Errorf("slot %q was invalidated (conflicting = true): %s, so events may be missing; %s",
			s.Name, cause, recoverAfter(fix))
	}
	if s.InvalidationReason == "" {
		cause, fix := lostCause(ReasonWALRemoved)
		return fmt.Errorf("slot %q was invalidated (wal_status = lost): %s, so events may be missing; %s",
			s.Name, cause, recoverAfter(fix))
	}
	cause, fix := lostCause(s.InvalidationReason)
	return fmt.Errorf("slot %q was invalidated (wal_status = lost, invalidation_reason = %s): %s, so events may be missing; %s",
		s.Name, s.InvalidationReason, cause, recoverAfter(fix))
}

// recoverAfter puts the fix of the cause before recover: a slot recreated
// while the cause remains is invalidated again (a standby still without
// hot_standby_feedback conflicts at the next vacuum on the primary), and
// the back-fill was for nothing.
func recoverAfter(fix string) string {
	return "first " + fix + ", then recreate the slot and back-fill from the outbox table (outbox-relay recover)"
}

// lostCause explains an invalidation_reason and how to keep it from
// happening again.
func lostCause(reason string) (cause, fix string) {
	switch reason {
	case ReasonWALRemoved:
		return "WAL it needed was removed", "raise max_slot_wal_keep_size"
	case ReasonIdleTimeout:
		return "it was inactive longer than idle_replication_slot_timeout",
			"raise idle_replication_slot_timeout above the longest relay outage (0 disables it)"
	case ReasonRowsRemoved:
		return "catalog rows it needed were removed (a slot on a standby: the primary vacuumed rows the standby had not asked it to keep)",
			"set hot_standby_feedback = on and primary_slot_name (a physical slot on the primary) on the standby, or a new slot there is invalidated the same way"
	case ReasonWALLevelInsufficient:
		return "the primary's wal_level is below logical (it was a slot on a standby)",
			"set wal_level = logical on the primary"
	default:
		return "PostgreSQL invalidated it", "see invalidation_reason in the PostgreSQL documentation of pg_replication_slots"
	}
}
