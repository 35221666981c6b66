//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// WAL safety: the relay warns when a stopped relay could fill the disk
// (max_slot_wal_keep_size unlimited) and refuses to go on with a slot that
// PostgreSQL invalidated because it retained more WAL than allowed
// (wal_status = lost), since the removed WAL may have held events.
//
// Each case uses a throwaway cluster (StartTempCluster) so that settings
// and invalidated slots never touch the shared stack.

// walEnv is an Env whose relay and CLI point at a temp cluster. Its DB
// stays on the shared stack (where the Env cleanup finds nothing to drop);
// db is the temp cluster's connection.
type walEnv struct {
	*Env
	pg *TempCluster
	db *pgx.Conn
}

func newWALEnv(t *testing.T, settings ...string) *walEnv {
	t.Helper()
	pg := StartTempCluster(t, append([]string{"wal_level=logical"}, settings...)...)
	env := NewEnv(t, EnvOptions{NoMigrate: true, NoTopic: true})
	env.DatabaseURL = pg.URL
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	db, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatalf("connect to temp cluster: %v", err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	w := &walEnv{Env: env, pg: pg, db: db}
	var keep, level string
	w.queryRow(t, `select current_setting('max_slot_wal_keep_size'), current_setting('wal_level')`).Scan(&keep, &level)
	t.Logf("temp cluster: wal_level=%s max_slot_wal_keep_size=%s", level, keep)
	return w
}

type scanFunc func(dest ...any)

// Scan runs the query and scans its row, failing the test on error.
func (f scanFunc) Scan(dest ...any) { f(dest...) }

func (w *walEnv) queryRow(t *testing.T, sql string, args ...any) scanFunc {
	return func(dest ...any) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := w.db.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
			t.Fatalf("temp cluster %q: %v", sql, err)
		}
	}
}

func (w *walEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := w.db.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("temp cluster %q: %v", sql, err)
	}
}

func (w *walEnv) migrate(t *testing.T) {
	t.Helper()
	if res := w.RunCLI(60*time.Second, nil, "migrate"); res.Code != 0 {
		t.Fatalf("outbox-relay migrate on the temp cluster: exit %d\n%s", res.Code, tail(res.Stderr, 20))
	}
}

// walStatus returns the slot's wal_status and restart_lsn ("" when NULL).
func (w *walEnv) walStatus(t *testing.T) (status, restart string) {
	t.Helper()
	var st, rl *string
	w.queryRow(t, `select wal_status, restart_lsn::text from pg_replication_slots where slot_name = $1`, w.Slot).Scan(&st, &rl)
	if st != nil {
		status = *st
	}
	if rl != nil {
		restart = *rl
	}
	return status, restart
}

// burnWAL writes about mb MiB of WAL (non-transactional logical messages:
// no table, no TOAST compression), switches segments and checkpoints,
// which is when PostgreSQL 15 invalidates slots past max_slot_wal_keep_size,
// until the slot is lost or rounds run out.
func (w *walEnv) burnWAL(t *testing.T, mb, rounds int) (status, restart string) {
	t.Helper()
	start := time.Now()
	var from string
	w.queryRow(t, `select pg_current_wal_lsn()::text`).Scan(&from)
	for i := 0; i < rounds; i++ {
		w.exec(t, `select count(pg_logical_emit_message(false, 'outbox_relay.it.walsafety', repeat('x', 1048576))) from generate_series(1, $1::int)`, mb)
		w.exec(t, `select pg_switch_wal()`)
		w.exec(t, `checkpoint`)
		status, restart = w.walStatus(t)
		if status == "lost" {
			break
		}
	}
	var written string
	w.queryRow(t, `select pg_size_pretty(pg_current_wal_lsn() - $1::pg_lsn)`, from).Scan(&written)
	t.Logf("wrote %s of WAL in %s: wal_status=%q restart_lsn=%q", written, time.Since(start).Round(time.Millisecond), status, restart)
	return status, restart
}

func TestWALSafety(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	t.Run("UnlimitedKeepSizeWarns", func(t *testing.T) {
		w := newWALEnv(t) // max_slot_wal_keep_size defaults to -1
		w.migrate(t)
		relay := w.StartRelay()
		const want = "max_slot_wal_keep_size"
		if !within(20*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(want) }) {
			t.Fatalf("no start-up warning mentioning %s within 20s; tail:\n%s", want, relay.LogTail(20))
		}
		lines := relay.LogLines(want, 2)
		t.Logf("warning: %v", lines)
		if !strings.Contains(lines[0], `"level":"warn"`) {
			t.Errorf("the %s line is not a warning: %s", want, lines[0])
		}
		if !relay.Running() {
			t.Fatalf("relay exited (code %d): the setting is a warning, not an error", relay.exitCode)
		}
		if code, exited := relay.Term(15 * time.Second); !exited || code != 0 {
			t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
		}
	})

	// A slot invalidated while no relay runs: `run` must refuse it.
	t.Run("LostSlotAtStart", func(t *testing.T) {
		w := newWALEnv(t, "max_slot_wal_keep_size=1MB")
		w.migrate(t)
		// An event committed before the WAL is lost: it is exactly what
		// may be missing.
		w.exec(t, `insert into `+w.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
			values (gen_random_uuid(), 'order', 'wal-1', 1, 'OrderUpdated', 1, '{}')`)
		if st, rl := w.walStatus(t); st == "lost" || rl == "" {
			t.Fatalf("slot already lost after migrate: wal_status=%q restart_lsn=%q", st, rl)
		}
		status, restart := w.burnWAL(t, 80, 3)
		if status != "lost" {
			t.Fatalf("slot wal_status=%q (restart_lsn %q) after writing WAL past max_slot_wal_keep_size, want lost", status, restart)
		}
		relay := w.StartRelay()
		code, exited := relay.Wait(30 * time.Second)
		if !exited {
			t.Fatalf("relay still running 30s after start on a lost slot; tail:\n%s", relay.LogTail(20))
		}
		t.Logf("exit %d: %v", code, relay.LogLines("wal_status = lost", 2))
		if code == 0 {
			t.Errorf("exit code 0 on a lost slot, want non-zero")
		}
		for _, want := range []string{"wal_status = lost", "events may be missing"} {
			if !relay.LogContains(want) {
				t.Errorf("relay log does not contain %q; tail:\n%s", want, relay.LogTail(20))
			}
		}
		if relay.LogContains("max_slot_wal_keep_size is unlimited") {
			t.Errorf("warned about an unlimited max_slot_wal_keep_size although it is 1MB")
		}
	})

	// The same while a relay streams but cannot confirm: its only event's
	// topic does not exist (no auto-creation, unknown-topic timeout far
	// away), so the slot stays at that event while WAL piles up.
	t.Run("LostSlotWhileRunning", func(t *testing.T) {
		w := newWALEnv(t, "max_slot_wal_keep_size=1MB")
		w.migrate(t)
		relay := w.StartRelay("OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m", "OUTBOX_RELAY_SLOT_CHECK_INTERVAL=1s")
		if !within(20*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) }) {
			t.Fatalf("relay not streaming within 20s; tail:\n%s", relay.LogTail(20))
		}
		w.exec(t, `insert into `+w.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
			values (gen_random_uuid(), 'order', 'wal-1', 1, 'OrderUpdated', 1, '{}')`)
		if !within(20*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains("topic metadata unavailable") }) {
			t.Fatalf("the event's topic %s did not stay unknown; tail:\n%s", w.Topic, relay.LogTail(20))
		}
		var active bool
		w.queryRow(t, `select active from pg_replication_slots where slot_name = $1`, w.Slot).Scan(&active)
		status, restart := w.burnWAL(t, 80, 3)
		t.Logf("slot was active=%v before the WAL burst", active)
		if status != "lost" {
			t.Fatalf("slot wal_status=%q (restart_lsn %q) after writing WAL past max_slot_wal_keep_size, want lost", status, restart)
		}
		start := time.Now()
		code, exited := relay.Wait(30 * time.Second)
		if !exited {
			t.Fatalf("relay still running 30s after its slot was lost; tail:\n%s", relay.LogTail(20))
		}
		t.Logf("exit %d %s after the slot was lost: %v", code, time.Since(start).Round(time.Millisecond), relay.LogLines("wal_status = lost", 2))
		if code == 0 {
			t.Errorf("exit code 0 on a lost slot, want non-zero")
		}
		for _, want := range []string{"wal_status = lost", "events may be missing"} {
			if !relay.LogContains(want) {
				t.Errorf("relay log does not contain %q; tail:\n%s", want, relay.LogTail(20))
			}
		}
	})
}
