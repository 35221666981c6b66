//go:build integration

package outbox

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// slotFor creates a logical slot named after the test's schema and drops
// it at cleanup.
func slotFor(t *testing.T, ctx context.Context, pool *pgxpool.Pool, tbl migrations.Table) string {
	t.Helper()
	slot := tbl.Schema
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(cctx, `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
	})
	return slot
}

// TestIntegrationHealthMonitorReadsSlot runs the monitor's queries on the
// real server: the slot reading, the forecast inputs and the relay's
// checkpoint row, and the age of unconfirmed WAL as the slot advances.
func TestIntegrationHealthMonitorReadsSlot(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	slot := slotFor(t, ctx, pool, tbl)
	m, err := NewHealthMonitor(pool, HealthConfig{Slot: slot, Table: tbl, Interval: time.Second, DiskBudget: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	h := m.Health()
	if h.Err != nil || h.At.IsZero() || h.RetainedWAL < 0 || h.OldestUnacked < 0 ||
		(h.WALStatus != "reserved" && h.WALStatus != "extended") {
		t.Fatalf("first reading: %+v", h)
	}
	t.Logf("first reading: %+v", h)
	first := h

	// The relay's checkpoint, as it saves it: commit_time of the last
	// acknowledged transaction.
	if _, err := pool.Exec(ctx, `INSERT INTO `+migrations.CheckpointTable(tbl).Quoted()+`
		(outbox_table, slot, lsn, commit_time, system_identifier, timeline)
		VALUES ($1, $2, pg_current_wal_lsn(), now() - interval '1 hour', 'test', 1)`, tbl.String(), slot); err != nil {
		t.Fatal(err)
	}
	// Confirm everything written so far (as the relay would), then write
	// an event the slot has not confirmed.
	if _, err := pool.Exec(ctx, `SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())`, slot); err != nil {
		t.Fatal(err)
	}
	// wall-clock: real time between the confirmed WAL and the append, on the clocks the monitor reads (the process's, the server's).
	time.Sleep(200 * time.Millisecond)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := NewWriter(tbl).Append(ctx, PgxTx(tx), validEvent()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Refresh(ctx); err != nil {
		t.Fatalf("Refresh with a checkpoint row: %v", err)
	}
	h = m.Health()
	// The first reading's WAL position is confirmed: the unconfirmed WAL
	// is younger than it, whatever the hour-old checkpoint says.
	if want := h.At.Sub(first.At); h.OldestUnacked != want {
		t.Fatalf("oldest unacknowledged = %v, want %v (since the first reading)", h.OldestUnacked, want)
	}
	// Two readings: a forecast unless the retained WAL did not grow. Its
	// value depends on what else writes WAL on the server.
	if h.Forecast == 0 || h.Forecast < -1 {
		t.Fatalf("forecast %v with the limits far away", h.Forecast)
	}
	t.Logf("after an unconfirmed append: %+v", h)

	// A monitor of a slot that does not exist refuses nothing and says why.
	missing, err := NewHealthMonitor(pool, HealthConfig{Slot: slot + "_missing", Soft: Budget{MaxRetainedWAL: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing slot: %v", err)
	}
	if err := missing.Check(PriorityLow); err != nil {
		t.Fatalf("missing slot refuses: %v", err)
	}
}

// TestIntegrationHealthMonitorWithoutCheckpointGrant: a producer role
// needs no privilege for the slot reading (pg_replication_slots and
// pg_current_wal_lsn() are open to PUBLIC); without SELECT on the
// checkpoint table the reading stays fresh and says so in Err.
func TestIntegrationHealthMonitorWithoutCheckpointGrant(t *testing.T) {
	ctx, pool, tbl := setup(t, migrations.ApplyOptions{})
	slot := slotFor(t, ctx, pool, tbl)
	role := tbl.Schema + "_app"
	if _, err := pool.Exec(ctx, `CREATE ROLE `+pgx.Identifier{role}.Sanitize()+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+pgx.Identifier{role}.Sanitize()); err != nil {
			t.Errorf("drop role: %v", err)
		}
	})
	if _, err := pool.Exec(ctx, `GRANT USAGE ON SCHEMA `+pgx.Identifier{tbl.Schema}.Sanitize()+` TO `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Before the schema is dropped (cleanups run last first).
		_, _ = pool.Exec(context.Background(), `REVOKE ALL ON SCHEMA `+pgx.Identifier{tbl.Schema}.Sanitize()+` FROM `+pgx.Identifier{role}.Sanitize())
	})
	conn, err := pgx.Connect(ctx, testURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `SET ROLE `+pgx.Identifier{role}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	m, err := NewHealthMonitor(conn, HealthConfig{Slot: slot, Table: tbl, Soft: Budget{MaxRetainedWAL: 1 << 40}})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Refresh(ctx)
	if err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Refresh without SELECT on the checkpoint table: %v", err)
	}
	if h := m.Health(); h.At.IsZero() || h.Err == nil || h.WALStatus == "" {
		t.Fatalf("the slot reading should stand: %+v", h)
	}
	if err := m.Check(PriorityLow); err != nil {
		t.Fatal(err)
	}
}
