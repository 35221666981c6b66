//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LSN is a PostgreSQL WAL position (pg_lsn) as a number, like pglogrepl.LSN.
type LSN uint64

// ParseLSN parses "X/Y".
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("bad lsn %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad lsn %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("bad lsn %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint64(l)>>32, uint32(l)) }

// SlotInfo is a row of pg_replication_slots.
type SlotInfo struct {
	Exists            bool
	Plugin            string
	Active            bool
	ActivePID         int32
	ConfirmedFlushLSN LSN
	ConfirmedFlush    string // text form, "" when null
	RestartLSN        string
}

// Slot reads pg_replication_slots for the named slot.
func Slot(ctx context.Context, db *DB, name string) (SlotInfo, error) {
	var s SlotInfo
	var plugin, cfl, rl *string
	var pid *int32
	err := db.QueryRow(ctx, `select plugin, active, active_pid, confirmed_flush_lsn::text, restart_lsn::text
		from pg_replication_slots where slot_name = $1`, name).Scan(&plugin, &s.Active, &pid, &cfl, &rl)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	s.Exists = true
	if plugin != nil {
		s.Plugin = *plugin
	}
	if pid != nil {
		s.ActivePID = *pid
	}
	if rl != nil {
		s.RestartLSN = *rl
	}
	if cfl != nil {
		s.ConfirmedFlush = *cfl
		if s.ConfirmedFlushLSN, err = ParseLSN(*cfl); err != nil {
			return s, err
		}
	}
	return s, nil
}

// SlotInfo returns the env's slot row, failing the test on query errors.
func (e *Env) SlotInfo() SlotInfo {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Slot(ctx, e.DB, e.Slot)
	if err != nil {
		e.t.Fatalf("slot %s: %v", e.Slot, err)
	}
	return s
}

// ConfirmedFlush returns the slot's confirmed_flush_lsn (0 when missing/null).
func (e *Env) ConfirmedFlush() LSN { return e.SlotInfo().ConfirmedFlushLSN }

// ConfirmedAtLeast asks PostgreSQL whether confirmed_flush_lsn >= lsn.
func (e *Env) ConfirmedAtLeast(lsn string) bool {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ok *bool
	err := e.DB.QueryRow(ctx, `select confirmed_flush_lsn >= $1::pg_lsn from pg_replication_slots where slot_name = $2`, lsn, e.Slot).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false
	}
	if err != nil {
		e.t.Fatalf("confirmed_flush_lsn >= %s: %v", lsn, err)
	}
	return ok != nil && *ok
}

// CurrentInsertLSN returns pg_current_wal_insert_lsn().
func (e *Env) CurrentInsertLSN() string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	if err := e.DB.QueryRow(ctx, `select pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		e.t.Fatalf("pg_current_wal_insert_lsn: %v", err)
	}
	return s
}

// CurrentLSN returns pg_current_wal_lsn() (the write position).
func (e *Env) CurrentLSN() string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var s string
	if err := e.DB.QueryRow(ctx, `select pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		e.t.Fatalf("pg_current_wal_lsn: %v", err)
	}
	return s
}

// WaitSlotActive waits until the slot is active (or not, per want).
func (e *Env) WaitSlotActive(want bool, timeout time.Duration) bool {
	return within(timeout, 100*time.Millisecond, func() bool {
		s := e.SlotInfo()
		return s.Exists && s.Active == want
	})
}
