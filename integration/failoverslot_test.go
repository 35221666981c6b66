//go:build integration

package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// failoverEnv is the environment of outbox-relay commands against database
// app of a temp primary, with their own slot, publication and table.
type failoverEnv struct {
	t                  *testing.T
	primary            *TempCluster
	slot, pub, table   string
	topic, urlPassword string
}

func newFailoverEnv(t *testing.T, p *TempCluster) *failoverEnv {
	sfx := randSuffix()
	p.Exec(t, `CREATE DATABASE app`)
	return &failoverEnv{t: t, primary: p, slot: "fs_" + sfx, pub: "fs_" + sfx, table: "public.outbox_" + sfx,
		topic: "it." + sfx + ".order", urlPassword: "s3cret" + sfx}
}

func (e *failoverEnv) env() []string {
	return processEnv([]string{
		"OUTBOX_RELAY_DATABASE_URL=" + e.primary.DBURL("app"),
		"OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(kafkaBrokers, ","),
		"OUTBOX_RELAY_SLOT=" + e.slot, "OUTBOX_RELAY_PUBLICATION=" + e.pub, "OUTBOX_RELAY_TABLE=" + e.table,
		"OUTBOX_RELAY_METRICS_ADDR=",
	})
}

func (e *failoverEnv) run(args ...string) CLIResult {
	e.t.Helper()
	return runCLI(e.t, 90*time.Second, e.env(), args...)
}

// doctor runs doctor with a --standby-url per standby (with a password in
// each URL, which must never be printed) and returns its result.
func (e *failoverEnv) doctor(standbys ...*TempCluster) CLIResult {
	e.t.Helper()
	args := []string{"doctor", "--topics", e.topic}
	for _, s := range standbys {
		args = append(args, "--standby-url", fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/postgres?sslmode=disable", e.urlPassword, s.Port))
	}
	res := e.run(args...)
	e.t.Logf("doctor: exit %d\n%s", res.Code, res.Stdout)
	if strings.Contains(res.Stdout+res.Stderr, e.urlPassword) {
		e.t.Errorf("doctor printed a --standby-url password:\n%s%s", res.Stdout, res.Stderr)
	}
	return res
}

// mustContain fails for each want the text lacks.
func mustContain(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}

// waitSlotSynced makes the standby's copy of the primary's failover slot
// synchronized and persistent: the copy stays temporary until the
// primary's slot has decoded a running-transactions record and confirmed
// past it, which an idle relay never makes it do.
func waitSlotSynced(t *testing.T, p, s *TempCluster, slot string) {
	t.Helper()
	for i := 0; ; i++ {
		p.Exec(t, `SELECT pg_log_standby_snapshot()`)
		p.ExecDB(t, "app", fmt.Sprintf(`SELECT pg_replication_slot_advance('%s', pg_current_wal_lsn())`, slot))
		if s.Query(t, "postgres", standbySlotSynced, slot) == "true" {
			return
		}
		if i == 150 {
			t.Fatalf("slot %s not synchronized to the standby on port %d", slot, s.Port)
		}
		// wall-clock: poll interval of a wait on the slot sync (bounded: 150 tries)
		time.Sleep(200 * time.Millisecond)
	}
}

// failLines returns the report's FAIL lines.
func failLines(report string) []string {
	return regexp.MustCompile(`(?m)^FAIL .*$`).FindAllString(report, -1)
}

// TestFailoverSlotDoctor: on PostgreSQL 17+ migrate creates a failover
// slot; doctor passes the failover chain of a correctly configured
// primary/standby pair, and names each missing piece with its fix (exit 1)
// on a standby without sync_replication_slots, hot_standby_feedback or a
// dbname in primary_conninfo, a primary without synchronized_standby_slots,
// and a slot created with --failover-slot=false; migrate --failover-slot
// then turns the flag on (refused while a client streams from the slot).
func TestFailoverSlotDoctor(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	bin := testPGBin(t)
	if major := testPGMajor(t, bin); major < 17 {
		t.Skipf("failover slots need PostgreSQL 17+, and %s holds %d: run with OUTBOX_RELAY_TEST_PG_BIN=.stack/pg-bin/17/bin (or 18)", bin, major)
	}
	requireRelay(t)
	p := StartTempClusterBin(t, bin, "wal_level=logical")
	e := newFailoverEnv(t, p)
	good := p.StartStandby(t, "sb_good", "sync_replication_slots=on", "hot_standby_feedback=on")
	bad := p.StartStandby(t, "sb_bad")
	// A primary_conninfo without dbname: slot synchronization cannot work.
	bad.Exec(t, fmt.Sprintf(`ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=%d user=postgres application_name=sb_bad'`, p.Port))
	bad.Exec(t, `SELECT pg_reload_conf()`)
	p.Exec(t, `ALTER SYSTEM SET synchronized_standby_slots = 'sb_good'`)
	p.Exec(t, `SELECT pg_reload_conf()`)
	activeSlot := `SELECT coalesce((SELECT active::text FROM pg_replication_slots WHERE slot_name = $1), 'missing')`
	p.WaitFor(t, 60*time.Second, "postgres", activeSlot, "true", "sb_good") // StartStandby(bad) restarted the primary

	res := e.run("migrate")
	if res.Code != 0 || !strings.Contains(res.Stdout, "(failover slot: standbys with sync_replication_slots = on keep a copy)") {
		t.Fatalf("migrate: exit %d\n%s%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	slotFailover := `SELECT coalesce((SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1), 'missing')`
	if got := p.Query(t, "postgres", slotFailover, e.slot); got != "true" {
		t.Fatalf("slot created by migrate: failover = %s, want true", got)
	}
	waitSlotSynced(t, p, good, e.slot)

	// Correct: the chain passes.
	res = e.doctor(good)
	goodName := fmt.Sprintf("standby 127.0.0.1:%d", good.Port)
	if res.Code != 0 || len(failLines(res.Stdout)) > 0 {
		t.Errorf("doctor on a correct pair: exit %d, want 0 without FAIL", res.Code)
	}
	mustContain(t, "doctor on a correct pair", res.Stdout,
		fmt.Sprintf(`PASS  failover slot                "%s" has failover = true`, e.slot),
		"PASS  synchronized_standby_slots   sb_good: physical, active",
		"PASS  "+goodName, "in recovery, same system identifier as the primary",
		fmt.Sprintf(`synchronizes "%s" (synced = true, failover = true)`, e.slot))

	// Incorrect: every missing piece is named with its fix.
	p.Exec(t, `ALTER SYSTEM RESET synchronized_standby_slots`)
	p.Exec(t, `SELECT pg_reload_conf()`)
	res = e.doctor(good, bad)
	badName := fmt.Sprintf("FAIL  standby 127.0.0.1:%d", bad.Port)
	if res.Code != 1 {
		t.Errorf("doctor on an incorrect pair: exit %d, want 1", res.Code)
	}
	mustContain(t, "doctor on an incorrect pair", res.Stdout,
		"FAIL  synchronized_standby_slots   empty: the relay receives changes as soon as the primary flushes them",
		"fix: on the primary: ALTER SYSTEM SET synchronized_standby_slots",
		badName+"      sync_replication_slots is off", "fix: on the standby: ALTER SYSTEM SET sync_replication_slots = on; SELECT pg_reload_conf()",
		badName+"      hot_standby_feedback is off", "fix: on the standby: ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf()",
		badName+"      primary_conninfo has no dbname", "add dbname=postgres",
		badName+`      its slot "sb_bad" is not in the primary's synchronized_standby_slots`,
		badName+fmt.Sprintf(`      has no copy of slot "%s"`, e.slot),
		"FAIL  "+goodName+`      its slot "sb_good" is not in the primary's synchronized_standby_slots`,
		"fix: on the primary: ALTER SYSTEM SET synchronized_standby_slots = 'sb_good'; SELECT pg_reload_conf()")

	// A slot created with --failover-slot=false: its flag fails (a standby
	// is named), the rest of the chain only warns.
	p.Exec(t, `ALTER SYSTEM SET synchronized_standby_slots = 'sb_good'`)
	p.Exec(t, `SELECT pg_reload_conf()`)
	if r := e.run("slot", "drop"); r.Code != 0 {
		t.Fatalf("slot drop: exit %d\n%s", r.Code, r.Stderr)
	}
	if r := e.run("slot", "create", "--failover-slot=false"); r.Code != 0 || strings.Contains(r.Stdout, "failover slot") {
		t.Fatalf("slot create --failover-slot=false: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if got := p.Query(t, "postgres", slotFailover, e.slot); got != "false" {
		t.Fatalf("slot create --failover-slot=false: failover = %s", got)
	}
	res = e.doctor(good)
	if fails := failLines(res.Stdout); res.Code != 1 || len(fails) != 1 {
		t.Errorf("doctor on a slot without failover: exit %d, FAIL lines %q; want 1 and only the slot's flag", res.Code, fails)
	}
	mustContain(t, "doctor on a slot without failover", res.Stdout,
		fmt.Sprintf(`FAIL  failover slot                "%s" has failover = false: standbys do not keep it`, e.slot),
		fmt.Sprintf(`fix: stop the relay, then outbox-relay migrate --failover-slot (ALTER_REPLICATION_SLOT "%s" (FAILOVER true)`, e.slot))
	if r := e.run("migrate"); r.Code != 0 || !strings.Contains(r.Stdout, "has failover = false: a failover to a standby loses it") {
		t.Errorf("migrate without --failover-slot on a slot without failover: exit %d, want 0 with a hint\n%s", r.Code, r.Stdout)
	}
	if got := p.Query(t, "postgres", slotFailover, e.slot); got != "false" {
		t.Fatalf("migrate without --failover-slot changed the slot: failover = %s", got)
	}

	// migrate --failover-slot: refused while a client streams from the
	// slot, done once it is idle.
	release := holdSlot(t, p.DBURL("app"), e.slot, e.pub)
	p.WaitFor(t, 30*time.Second, "postgres", activeSlot, "true", e.slot)
	res = e.run("migrate", "--failover-slot")
	if res.Code != 1 {
		t.Errorf("migrate --failover-slot on an active slot: exit %d, want 1", res.Code)
	}
	mustContain(t, "migrate --failover-slot on an active slot", res.Stderr,
		fmt.Sprintf(`slot %q is active under pid`, e.slot), "stop the relay, run outbox-relay migrate --failover-slot again, then start the relay")
	release()
	p.WaitFor(t, 30*time.Second, "postgres", activeSlot, "false", e.slot)
	res = e.run("migrate", "--failover-slot")
	if res.Code != 0 || !strings.Contains(res.Stdout, fmt.Sprintf("slot %s: failover set to true", e.slot)) {
		t.Fatalf("migrate --failover-slot: exit %d\n%s%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	if got := p.Query(t, "postgres", slotFailover, e.slot); got != "true" {
		t.Fatalf("after migrate --failover-slot: failover = %s", got)
	}
	if r := e.run("slot", "status"); !strings.Contains(r.Stdout, `"failover": true`) {
		t.Errorf("slot status lacks failover = true:\n%s", r.Stdout)
	}
	waitSlotSynced(t, p, good, e.slot)
	if res = e.doctor(good); res.Code != 0 || len(failLines(res.Stdout)) > 0 {
		t.Errorf("doctor after migrate --failover-slot: exit %d, want 0 without FAIL", res.Code)
	}

	// recover recreates a lost slot with the same option (over a
	// replication connection, with an exported snapshot).
	for _, on := range []bool{true, false} {
		if r := e.run("slot", "drop"); r.Code != 0 {
			t.Fatalf("slot drop: exit %d\n%s", r.Code, r.Stderr)
		}
		r := e.run("recover", "--all", "--no-run", fmt.Sprintf("--failover-slot=%t", on))
		if r.Code != 0 {
			t.Fatalf("recover --failover-slot=%t: exit %d\n%s%s", on, r.Code, r.Stdout, tail(r.Stderr, 20))
		}
		if got := p.Query(t, "postgres", slotFailover, e.slot); got != fmt.Sprint(on) {
			t.Errorf("slot recreated by recover --failover-slot=%t: failover = %s", on, got)
		}
	}

	// run creates a missing slot at its first start, with the same option.
	for _, on := range []bool{false, true} {
		if r := e.run("slot", "drop"); r.Code != 0 {
			t.Fatalf("slot drop: exit %d\n%s", r.Code, r.Stderr)
		}
		if r := e.run("checkpoint", "reset"); r.Code != 0 { // else run refuses: the slot was lost after a checkpoint
			t.Fatalf("checkpoint reset: exit %d\n%s", r.Code, r.Stderr)
		}
		relay := StartRelay(t, e.env(), fmt.Sprintf("--failover-slot=%t", on))
		// Streaming, not only an active slot: the slot is active while the relay still
		// creates it (waiting for a consistent snapshot), and a stop then aborts the creation.
		if !within(60*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) }) {
			t.Fatalf("run --failover-slot=%t is not streaming after 60s:\n%s", on, relay.LogTail(20))
		}
		p.WaitFor(t, 60*time.Second, "postgres", activeSlot, "true", e.slot)
		if code, exited := relay.Term(30 * time.Second); !exited || code != 0 {
			t.Fatalf("run: exit %d (exited %v)\n%s", code, exited, relay.LogTail(20))
		}
		if got := p.Query(t, "postgres", slotFailover, e.slot); got != fmt.Sprint(on) {
			t.Errorf("slot created by run --failover-slot=%t: failover = %s", on, got)
		}
	}
}

// holdSlot streams the slot on a replication connection, as a running
// relay would, until the returned function is called.
func holdSlot(t *testing.T, url, slot, pub string) (release func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url+"&replication=database")
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pub + "'"}})
	if err != nil {
		conn.Close(context.Background())
		t.Fatalf("START_REPLICATION %s: %v", slot, err)
	}
	return func() { conn.Close(context.Background()) }
}

// TestFailoverSlotDoctorBefore17: PostgreSQL 15 and 16 have no failover
// slots: migrate ignores --failover-slot and says so, and doctor with
// --standby-url checks only what those standbys have (recovery, system
// identifier, hot_standby_feedback) and says failover slots need 17.
func TestFailoverSlotDoctorBefore17(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	bin := testPGBin(t)
	major := testPGMajor(t, bin)
	if major >= 17 {
		t.Skipf("PostgreSQL %d has failover slots: TestFailoverSlotDoctor covers it", major)
	}
	requireRelay(t)
	p := StartTempClusterBin(t, bin, "wal_level=logical")
	e := newFailoverEnv(t, p)
	s := p.StartStandby(t, "sb1")
	if r := e.run("migrate", "--failover-slot"); r.Code != 0 ||
		!strings.Contains(r.Stdout, fmt.Sprintf("--failover-slot ignored: PostgreSQL %d has no failover slots (they need 17)", major)) {
		t.Fatalf("migrate --failover-slot on %d: exit %d\n%s%s", major, r.Code, r.Stdout, tail(r.Stderr, 20))
	}
	res := e.doctor(s)
	if res.Code != 0 || len(failLines(res.Stdout)) > 0 {
		t.Errorf("doctor on a %d pair: exit %d, want 0 without FAIL", major, res.Code)
	}
	mustContain(t, fmt.Sprintf("doctor on a %d pair", major), res.Stdout,
		fmt.Sprintf("WARN  failover slot                PostgreSQL %d has no failover slots (they need 17)", major),
		"fix: after a failover run outbox-relay recover on the new primary",
		fmt.Sprintf("PASS  standby 127.0.0.1:%d", s.Port), "in recovery, same system identifier as the primary",
		"hot_standby_feedback is off")
	if strings.Contains(res.Stdout, "sync_replication_slots") {
		t.Errorf("doctor on %d checks sync_replication_slots, which only 17+ has", major)
	}
}
