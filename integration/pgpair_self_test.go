//go:build integration

package integration

import (
	"testing"
	"time"
)

// standbySlotSynced is true once slot $1 is synchronized on a standby and
// persistent: a synced slot that is still temporary is dropped at promotion.
const standbySlotSynced = `SELECT coalesce((SELECT (synced AND NOT temporary)::text FROM pg_replication_slots WHERE slot_name = $1), 'missing')`

// TestTempStandby checks the primary/standby harness itself: the standby
// streams, sees the primary's commits, and accepts writes after promotion
// on the next timeline. On PostgreSQL 17+ it also checks that a failover
// logical slot is synchronized to the standby (synced = true), the
// mechanism the failover tests rely on.
func TestTempStandby(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	bin := testPGBin(t)
	major := testPGMajor(t, bin)
	p := StartTempClusterBin(t, bin, "wal_level=logical")
	settings := []string{"hot_standby_feedback=on"}
	if major >= 17 {
		settings = append(settings, "sync_replication_slots=on")
	}
	s := p.StartStandby(t, "standby1", settings...)
	p.Exec(t, `CREATE TABLE pair_probe (id int PRIMARY KEY)`)
	p.Exec(t, `INSERT INTO pair_probe VALUES (1)`)
	s.WaitFor(t, 30*time.Second, "postgres", `SELECT count(*)::text FROM pair_probe`, "1")
	if major >= 17 {
		p.Exec(t, `ALTER SYSTEM SET synchronized_standby_slots = 'standby1'`)
		p.Exec(t, `SELECT pg_reload_conf()`)
		p.Exec(t, `SELECT pg_create_logical_replication_slot('pair_logical', 'pgoutput', false, false, true)`)
		for i := 2; i < 5; i++ {
			p.Exec(t, `INSERT INTO pair_probe VALUES (`+string(rune('0'+i))+`)`)
		}
		// A synced slot stays temporary (and is dropped at promotion) until
		// the primary's slot's catalog_xmin passes the standby's: the slot
		// must decode a running-transactions record and confirm past it.
		for i := 0; ; i++ {
			p.Exec(t, `SELECT pg_log_standby_snapshot()`)
			p.Exec(t, `SELECT pg_replication_slot_advance('pair_logical', pg_current_wal_lsn())`)
			if s.Query(t, "postgres", standbySlotSynced, "pair_logical") == "true" {
				break
			}
			if i == 100 {
				t.Fatalf("slot pair_logical not synchronized to the standby")
			}
			// wall-clock: poll interval of a wait on the slot sync (bounded: 100 tries)
			time.Sleep(200 * time.Millisecond)
		}
	}
	if got := s.Query(t, "postgres", `SELECT timeline_id::text FROM pg_control_checkpoint()`); got != "1" {
		t.Fatalf("standby timeline = %s, want 1", got)
	}
	p.Stop(t, "immediate")
	s.Promote(t)
	s.Exec(t, `INSERT INTO pair_probe VALUES (100)`)
	s.WaitFor(t, 30*time.Second, "postgres", `SELECT (SELECT timeline_id FROM pg_control_checkpoint())::text`, "2")
	if major >= 17 {
		if got := s.Query(t, "postgres", `SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'pair_logical'`); got != "1" {
			t.Fatalf("synced slot missing after promotion")
		}
	}
}
