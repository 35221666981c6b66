package slot

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Plugin is the only output plugin the relay decodes.
const Plugin = "pgoutput"

// DB is the subset of pgx.Conn / pgxpool.Pool the slot manager uses.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrSlotNotFound is returned by Status for a slot that does not exist.
var ErrSlotNotFound = errors.New("replication slot does not exist")

// Status is a snapshot of a slot from pg_replication_slots.
type Status struct {
	Name     string
	Plugin   string
	Database string
	Active   bool
	// ActivePID is the backend streaming from the slot, 0 when inactive.
	ActivePID         int32
	ConfirmedFlushLSN pglogrepl.LSN
	RestartLSN        pglogrepl.LSN
	// WALStatus is reserved, extended, unreserved or lost; lost means the
	// slot can never resume and events may be missing.
	WALStatus string
	// InvalidationReason says why a lost slot was invalidated
	// (pg_replication_slots.invalidation_reason, PostgreSQL 17+; see
	// ReasonWALRemoved and the others). Empty for a slot that is not lost,
	// and before 17.
	InvalidationReason string
	// SafeWALSize is the bytes that can still be written before the slot
	// is invalidated; -1 when max_slot_wal_keep_size is unlimited.
	SafeWALSize int64
	// CurrentLSN is the server's WAL position at the time of the
	// snapshot: pg_current_wal_lsn() on a primary; on a standby
	// pg_last_wal_replay_lsn(), what it has replayed and so can decode.
	CurrentLSN pglogrepl.LSN
	// LagBytes is CurrentLSN - ConfirmedFlushLSN: WAL not yet confirmed.
	LagBytes int64
	// RetainedBytes is CurrentLSN - RestartLSN: WAL the slot pins on disk.
	RetainedBytes int64
	// Failover is the slot's failover flag (PostgreSQL 17+; always false
	// before): standbys with sync_replication_slots = on keep a copy of
	// the slot, so it survives a failover.
	Failover bool
	// Conflicting is pg_replication_slots.conflicting (PostgreSQL 16+):
	// the slot was invalidated. On 17+ only by a conflict with recovery
	// (a standby's slot whose catalog rows the primary removed); on 16 by
	// any invalidation, WAL removal included (wal_status = lost then).
	// It can never resume, like a lost slot (LostError).
	Conflicting bool
	// OnStandby: the slot lives on a server in recovery, a hot standby
	// that decodes the WAL it replays (PostgreSQL 16+).
	OnStandby bool
}

// Manager handles one slot and its publication.
type Manager struct {
	db          DB
	slot        string
	publication string
	cfg         Config
}

// NewManager returns a manager on db for the slot and publication cfg
// names; cfg also says how Create (and Ensure) create the slot.
func NewManager(db DB, cfg Config) *Manager {
	return &Manager{db: db, slot: cfg.Name, publication: cfg.Publication, cfg: cfg}
}

// Status reads the slot's row. It returns ErrSlotNotFound when there is none.
func (m *Manager) Status(ctx context.Context) (Status, error) {
	var s Status
	var plugin, database, walStatus *string
	var pid *int32
	var confirmed, restart *string
	var safe *int64
	var current string
	err := m.db.QueryRow(ctx, `
		SELECT slot_name, plugin, database, active, active_pid,
		       confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size,
		       `+currentLSN+`::text, coalesce((to_jsonb(s) ->> 'failover')::bool, false),
		       coalesce((to_jsonb(s) ->> 'conflicting')::bool, false), pg_is_in_recovery()
		FROM pg_replication_slots s WHERE slot_name = $1`, m.slot).
		Scan(&s.Name, &plugin, &database, &s.Active, &pid, &confirmed, &restart, &walStatus, &safe, &current, &s.Failover,
			&s.Conflicting, &s.OnStandby)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("slot %q: %w", m.slot, ErrSlotNotFound)
	}
	if err != nil {
		return s, fmt.Errorf("read slot %q: %w", m.slot, err)
	}
	s.Plugin, s.Database, s.WALStatus = deref(plugin), deref(database), deref(walStatus)
	if pid != nil {
		s.ActivePID = *pid
	}
	s.SafeWALSize = -1
	if safe != nil {
		s.SafeWALSize = *safe
	}
	if s.CurrentLSN, err = pglogrepl.ParseLSN(current); err != nil {
		return s, err
	}
	if confirmed != nil {
		if s.ConfirmedFlushLSN, err = pglogrepl.ParseLSN(*confirmed); err != nil {
			return s, err
		}
		s.LagBytes = int64(s.CurrentLSN) - int64(s.ConfirmedFlushLSN)
	}
	if restart != nil {
		if s.RestartLSN, err = pglogrepl.ParseLSN(*restart); err != nil {
			return s, err
		}
		s.RetainedBytes = int64(s.CurrentLSN) - int64(s.RestartLSN)
	}
	if s.WALStatus == "lost" || s.Conflicting {
		if s.InvalidationReason, err = m.invalidationReason(ctx); err != nil {
			return s, err
		}
	}
	return s, nil
}

// currentLSN is the server's WAL position: where a primary writes, or up
// to where a standby has replayed (pg_current_wal_lsn() fails in
// recovery).
const currentLSN = `(CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END)`

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Create creates the slot with the pgoutput plugin, on PostgreSQL 17+ as a
// failover slot unless Config.NoFailover. The publication must exist
// first: pgoutput looks it up as of each decoded transaction.
func (m *Manager) Create(ctx context.Context) (Status, error) {
	v, err := ServerVersion(ctx, m.db)
	if err != nil {
		return Status{}, fmt.Errorf("create slot %q: %w", m.slot, err)
	}
	standby, err := InRecovery(ctx, m.db)
	if err != nil {
		return Status{}, fmt.Errorf("create slot %q: %w", m.slot, err)
	}
	switch {
	case standby:
		var stop func()
		if stop, err = m.cfg.askPrimary(ctx, v); err != nil {
			return Status{}, fmt.Errorf("create slot %q: %w", m.slot, err)
		}
		// A standby's slot is not a failover slot (the server refuses):
		// it survives the standby's own promotion.
		_, err = m.db.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, $2)`, m.slot, Plugin)
		stop()
	case m.cfg.failoverOn(v):
		// (name, plugin, temporary, two_phase, failover)
		_, err = m.db.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, $2, false, false, true)`, m.slot, Plugin)
	default:
		_, err = m.db.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, $2)`, m.slot, Plugin)
	}
	if err != nil {
		return Status{}, fmt.Errorf("create slot %q: %w", m.slot, err)
	}
	return m.Status(ctx)
}

// Drop drops the slot. Its retained WAL is released; events not yet
// confirmed are no longer delivered by any slot.
func (m *Manager) Drop(ctx context.Context) error {
	if _, err := m.db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, m.slot); err != nil {
		return fmt.Errorf("drop slot %q: %w", m.slot, err)
	}
	return nil
}

// Ensure returns the slot's status, creating the slot if it is missing,
// and verifies the relay may stream from it.
func (m *Manager) Ensure(ctx context.Context) (Status, error) {
	s, err := m.Status(ctx)
	if errors.Is(err, ErrSlotNotFound) {
		s, err = m.Create(ctx)
	}
	if err != nil {
		return s, err
	}
	return s, m.Check(ctx, s)
}

// Check verifies that s is a slot this relay can stream from.
func (m *Manager) Check(ctx context.Context, s Status) error {
	if s.Plugin != Plugin {
		return fmt.Errorf("slot %q uses output plugin %q, the relay needs %q: drop it (outbox-relay slot drop) or choose another name with Database.Slot",
			m.slot, s.Plugin, Plugin)
	}
	var db string
	if err := m.db.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		return fmt.Errorf("read current database: %w", err)
	}
	if s.Database != db {
		return fmt.Errorf("slot %q belongs to database %q, not %q: connect to %q or choose another slot name with Database.Slot",
			m.slot, s.Database, db, s.Database)
	}
	if s.Active {
		return &ActiveError{Slot: m.slot, PID: s.ActivePID}
	}
	return s.LostError()
}

// ActiveError reports a slot streamed by another process.
type ActiveError struct {
	Slot string
	PID  int32
}

func (e *ActiveError) Error() string {
	return fmt.Sprintf("slot %q is active under pid %d: another relay or client streams from it; stop it "+
		"(SELECT pg_terminate_backend(%d)) or use another Database.Slot", e.Slot, e.PID, e.PID)
}
