//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/slot"
)

// TestSlotOnStandby: a logical slot is created on a hot standby
// (PostgreSQL 16+) within seconds, the primary asked for the
// running-transactions record the creation waits for; its status reads on
// the standby (the replayed position, not pg_current_wal_lsn(), which
// fails in recovery); and it decodes what the primary commits. Without
// the primary the creation is refused with the reason, before 16 with the
// version (issue 38, first step: the slot; the relay's replication URL
// comes next).
func TestSlotOnStandby(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	bin := testPGBin(t)
	major := testPGMajor(t, bin)
	p := StartTempClusterBin(t, bin, "wal_level=logical")
	s := p.StartStandby(t, "sb_decode", "hot_standby_feedback=on")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	primary, err := pgxpool.New(ctx, p.DBURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	standby, err := pgxpool.New(ctx, s.DBURL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	p.Exec(t, `CREATE TABLE decoded (id int PRIMARY KEY)`)
	s.WaitFor(t, 30*time.Second, "postgres", `SELECT (to_regclass('public.decoded') IS NOT NULL)::text`, "true")

	cfg := slot.Config{Name: "standby_slot", Publication: "decoded_pub"}
	if _, err := slot.NewManager(standby, cfg).Create(ctx); err == nil ||
		!strings.Contains(err.Error(), "pg_log_standby_snapshot") && !strings.Contains(err.Error(), "needs PostgreSQL 16") {
		t.Fatalf("a standby's slot without its primary: %v, want the reason", err)
	}
	cfg.Primary = primary
	m := slot.NewManager(standby, cfg)
	// The publication is DDL: the standby's manager creates it on the
	// primary, and the standby gets it by replication.
	if err := m.EnsurePublication(ctx, `"public"."decoded"`, "public", "decoded"); err != nil {
		t.Fatalf("ensure the publication through the standby's manager: %v", err)
	}
	s.WaitFor(t, 30*time.Second, "postgres", `SELECT count(*)::text FROM pg_publication WHERE pubname = 'decoded_pub'`, "1")
	if major < 16 {
		if _, err := m.Create(ctx); err == nil || !strings.Contains(err.Error(), "needs PostgreSQL 16 or later") {
			t.Fatalf("PostgreSQL %d standby: %v, want refused by version", major, err)
		}
		return
	}
	// Without the primary's records the creation waits for the next one
	// the primary writes on its own (every 15 s when busy, never when
	// idle): 10 s is a generous bound for one asked for every 200 ms.
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
	start := time.Now()
	st, err := m.Create(cctx)
	ccancel()
	if err != nil {
		t.Fatalf("create on the standby: %v (after %s)", err, time.Since(start))
	}
	t.Logf("PostgreSQL %d: slot created on the standby in %s at %s", major, time.Since(start).Round(time.Millisecond), st.ConfirmedFlushLSN)
	if !st.OnStandby || st.Failover || st.CurrentLSN == 0 || st.Plugin != slot.Plugin {
		t.Errorf("status %+v: want on the standby, not a failover slot, with the replayed position", st)
	}
	if err := m.Check(ctx, st); err != nil {
		t.Errorf("check: %v", err)
	}
	if got := p.Query(t, "postgres", `SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = 'standby_slot'`); got != "0" {
		t.Errorf("the slot exists on the primary too (%s): it must live on the standby only", got)
	}

	// The standby decodes what the primary commits, once replayed.
	p.Exec(t, `INSERT INTO decoded SELECT generate_series(1, 5)`)
	var lsn string
	if err := primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	s.WaitReplayed(t, lsn, 30*time.Second)
	peek := `SELECT count(*)::text FROM pg_logical_slot_peek_binary_changes('standby_slot', NULL, NULL,
		'proto_version', '1', 'publication_names', 'decoded_pub') WHERE get_byte(data, 0) = 73` // 'I': an insert
	if got := s.Query(t, "postgres", peek); got != "5" {
		t.Errorf("the standby decoded %s inserts, want 5", got)
	}
	after, err := m.Status(ctx)
	if err != nil || after.CurrentLSN < st.CurrentLSN || after.LostError() != nil {
		t.Errorf("status after the inserts: %+v, %v", after, err)
	}
}

// TestDecodeFromStandby: with --replication-url the relay decodes on a
// hot standby (PostgreSQL 16+). migrate creates the slot there; under
// write load on the primary, with a kill -9 of the relay in between,
// every committed event reaches Kafka in per-aggregate order; the primary
// runs no logical walsender, the standby does; and once the writers stop,
// the heartbeats written on the primary reach the standby and move its
// slot past the last write (issue 38).
func TestDecodeFromStandby(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	r := newDecodingRig(t, "sb_relay", false, "hot_standby_feedback=on")
	p, s, cli, major := r.primary, r.standby, r.cli, r.major
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r.cli = append(slices.Clone(cli), "OUTBOX_RELAY_METRICS_ADDR="+metricsAddr, "OUTBOX_RELAY_STATS_INTERVAL=200ms")
	relay := r.start(200)
	logical := `SELECT count(*)::text FROM pg_stat_replication WHERE application_name = 'outbox-relay'`
	if got := s.Query(t, "postgres", logical); got != "1" {
		t.Errorf("the standby runs %s relay walsenders, want 1", got)
	}
	if got := p.Query(t, "postgres", logical); got != "0" {
		t.Errorf("the primary runs %s relay walsenders, want 0: it must only stream WAL to the standby", got)
	}
	// The standby's replay lag is measured beside the slot's lag there.
	replayLag := fmt.Sprintf(`outbox_relay_standby_replay_lag_bytes{slot=%q}`, r.env.Slot)
	if !within(10*time.Second, 100*time.Millisecond, func() bool { return metricValue(t, metricsAddr, replayLag) >= 0 }) {
		t.Errorf("no %s on /metrics", replayLag)
	}
	relay.Kill9()
	n := len(r.consumer.Records())
	relay = r.startRelay()
	if !r.consumer.WaitCount(n+200, 30*time.Second) {
		t.Fatalf("the relay did not go on after kill -9\n%s", relay.LogTail(20))
	}
	res := r.settle(r.env.DB, 30*time.Second)
	t.Logf("PostgreSQL %d, decoded on the standby: %s", major, res)

	// Idle: only heartbeats from now on; the standby's slot confirms past
	// the primary's position at the last write.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last string
	if err := r.env.DB.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	past := `SELECT coalesce((SELECT (confirmed_flush_lsn >= $2::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = $1), 'missing')`
	s.WaitFor(t, 30*time.Second, "postgres", past, "true", r.env.Slot, last)

	// doctor checks the standby: this one passes; one without
	// hot_standby_feedback fails, with the fix.
	doc := r.env.RunCLI(60*time.Second, cli, "doctor", "--topics", r.env.Topic)
	if !strings.Contains(doc.Stdout, "PASS  decoding standby") || !strings.Contains(doc.Stdout, "PASS  slot") {
		t.Errorf("doctor on the decoding standby: exit %d\n%s%s", doc.Code, doc.Stdout, tail(doc.Stderr, 10))
	}
	bad := p.StartStandby(t, "sb_nofeedback")
	badCLI := append(slices.Clone(cli[:1]), "OUTBOX_RELAY_REPLICATION_URL="+bad.DBURL("postgres"))
	doc = r.env.RunCLI(60*time.Second, badCLI, "doctor", "--topics", r.env.Topic)
	if doc.Code != 1 || !strings.Contains(doc.Stdout, "FAIL  decoding standby") || !strings.Contains(doc.Stdout, "hot_standby_feedback is off") {
		t.Errorf("doctor on a standby without hot_standby_feedback: exit %d\n%s%s", doc.Code, doc.Stdout, tail(doc.Stderr, 10))
	}
}
