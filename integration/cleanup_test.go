//go:build integration

package integration

// outbox-relay cleanup and the leader's cleanup schedule (docs/operations.md,
// "Cleanup"): only rows confirmed by a checkpoint, past the retention and
// not dead-lettered are deleted; a partitioned outbox has old partitions
// dropped.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// cleanupReport is the stable summary line of `outbox-relay cleanup`.
var cleanupReport = regexp.MustCompile(`deleted (\d+) rows in (\d+) batches, dropped (\d+) partitions, in (\S+); WAL written meanwhile (-?\d+) bytes`)

type cleanupStats struct {
	rows, batches, partitions, wal int64
	elapsed                        string
}

func parseCleanup(t *testing.T, res CLIResult) cleanupStats {
	t.Helper()
	m := cleanupReport.FindStringSubmatch(res.Stdout)
	if res.Code != 0 || m == nil {
		t.Fatalf("cleanup: exit %d, no summary line\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	return cleanupStats{rows: n(m[1]), batches: n(m[2]), partitions: n(m[3]), elapsed: m[4], wal: n(m[5])}
}

// tableIDs returns the event ids in the env's outbox table.
func tableIDs(t testing.TB, env *Env) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]bool{}
	err := env.DB.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `select event_id::text from `+env.QuotedTable())
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			out[id] = true
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read outbox ids: %v", err)
	}
	return out
}

// requireSameIDs fails unless got holds exactly want's ids.
func requireSameIDs(t *testing.T, what string, got map[string]bool, want map[string]Event) {
	t.Helper()
	var extra, missing []string
	for id := range got {
		if _, ok := want[id]; !ok {
			extra = append(extra, id)
		}
	}
	for id, e := range want {
		if !got[id] {
			missing = append(missing, id+" ("+e.AggregateType+"/"+e.AggregateID+")")
		}
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 || len(missing) > 0 {
		t.Fatalf("%s: %d rows, want %d; %d unexpected (deleted too little): %v; %d missing (deleted wrongly): %v",
			what, len(got), len(want), len(extra), firstN(extra, 10), len(missing), firstN(missing, 10))
	}
}

// fenceXmin is the fence of the env's newest checkpoint (0 when none).
func (e *Env) fenceXmin(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var x *int64
	err := e.DB.QueryRow(ctx, `select fence_xmin from public.outbox_relay_checkpoint
		where outbox_table = $1 and slot = $2 order by id desc limit 1`, e.Table, e.Slot).Scan(&x)
	if err != nil || x == nil {
		return 0
	}
	return *x
}

// ageRows sets created_at of the rows matching where to 2 hours ago in one
// transaction and returns its xid: the rows count as committed then.
func ageRows(t *testing.T, env *Env, where string, args ...any) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := env.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if _, err := tx.Exec(ctx, `update `+env.QuotedTable()+` set created_at = now() - interval '2 hours' where `+where, args...); err != nil {
		t.Fatalf("age rows: %v", err)
	}
	var xid int64
	if err := tx.QueryRow(ctx, `select txid_current()`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return xid
}

// ageHistory moves the env's checkpoints whose fence is at or below xid
// back by age, as if they were saved then: cleanup keeps every row a
// checkpoint inside the retention may replay, so aging rows alone (as
// ageRows does) is not enough to make them deletable.
func ageHistory(t *testing.T, env *Env, xid int64, age string) {
	t.Helper()
	env.Exec(`update public.outbox_relay_checkpoint set fence_at = fence_at - $3::interval, saved_at = saved_at - $3::interval,
		started_at = started_at - $3::interval where outbox_table = $1 and slot = $2 and fence_xmin <= $4`, env.Table, env.Slot, age, xid)
}

// TestCleanupKeepsUnconfirmed: rows delivered and checkpointed before the
// cutoff are deleted in several batches; rows newer than the cutoff, rows
// behind an event stuck on an unknown topic (delivered to Kafka, but the
// checkpoint cannot pass the stuck one), rows written while no relay ran,
// and the rows of a quarantined aggregate are kept — exactly.
func TestCleanupKeepsUnconfirmed(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	relay := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms", "OUTBOX_RELAY_HEARTBEAT_INTERVAL=200ms",
		"OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m", "OUTBOX_RELAY_SHUTDOWN_TIMEOUT=2s")
	c := StartConsumer(t, env.Topic, env.Partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// Delivered: 3000 events in 300 transactions.
	delivered := NewLedger()
	w := env.NewWriter(delivered)
	for i := 0; i < 300; i++ {
		ids := make([]string, 10)
		for j := range ids {
			ids[j] = aggName((i*10 + j) % 50)
		}
		if _, err := w.Write(ctx, ids, true); err != nil {
			t.Fatal(err)
		}
	}
	// A quarantined aggregate (1 healthy event, the poison, 2 parked) and a
	// resolved one (its poison discarded).
	bad := `{"bad": 1}`
	qw := newAggWriter(env, "q-1", delivered)
	qBefore := qw.writeN(ctx, t, 1, 0)
	qPoison, _ := qw.mustWrite(ctx, t, &bad, "")
	qAfter := qw.writeN(ctx, t, 2, 0)
	rw := newAggWriter(env, "r-1", delivered)
	rPoison, _ := rw.mustWrite(ctx, t, &bad, "")
	waitDL(t, env, "q-1", 30*time.Second, "1 dead + 2 parked", func(r []dlRow) bool { return len(r) == 3 })
	waitDL(t, env, "r-1", 30*time.Second, "1 dead", func(r []dlRow) bool { return len(r) == 1 })
	if res := env.RunCLI(60*time.Second, nil, "dlq", "discard", rPoison.ID, "--reason", "cleanup test"); res.Code != 0 {
		t.Fatalf("dlq discard: exit %d\n%s", res.Code, res.Stderr)
	}
	quarantined := idsOf(qBefore, []Event{qPoison}, qAfter)
	if !c.WaitFor(union(delivered.Committed(), idsOf(qBefore)), 60*time.Second, time.Second) {
		t.Fatalf("delivered events did not all arrive")
	}
	aged := union(delivered.Committed(), quarantined, idsOf([]Event{rPoison}))

	// Age everything so far; the update's xid is then what the fence must pass.
	xid := ageRows(t, env, `true`)
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.fenceXmin(t) > xid }) {
		t.Fatalf("checkpoint fence %d did not pass the aging update's xid %d", env.fenceXmin(t), xid)
	}
	ageHistory(t, env, xid, "2 hours")

	// Newer than the cutoff: delivered and checkpointed, but young.
	newer := NewLedger()
	nw := env.NewWriter(newer)
	nw.versions = w.versions
	for i := 0; i < 20; i++ {
		if _, err := nw.Write(ctx, []string{aggName(i), aggName(i + 20)}, true); err != nil {
			t.Fatal(err)
		}
	}
	if !c.WaitFor(newer.Committed(), 60*time.Second, 0) {
		t.Fatal("newer events did not arrive")
	}

	// Stuck: an event for a topic that does not exist holds the checkpoint;
	// the 100 events after it reach Kafka, yet are not confirmed.
	ghosts := NewLedger()
	gw := env.NewWriter(ghosts)
	gw.AggregateType = "ghost"
	if _, err := gw.Write(ctx, []string{"g-1"}, true); err != nil {
		t.Fatal(err)
	}
	behind := NewLedger()
	bw := env.NewWriter(behind)
	for i := 0; i < 20; i++ {
		if _, err := bw.Write(ctx, []string{"b-" + strconv.Itoa(i%5), "b-" + strconv.Itoa(5+i%5), "b-" + strconv.Itoa(10+i%5), "b-x", "b-y"}, true); err != nil {
			t.Fatal(err)
		}
	}
	if !c.WaitFor(behind.Committed(), 60*time.Second, 0) {
		t.Fatal("the events behind the stuck one did not reach Kafka")
	}
	stuckFence := env.fenceXmin(t)
	ageRows(t, env, `aggregate_type = 'ghost' or aggregate_id like 'b-%'`)
	time.Sleep(time.Second) // wall-clock: a negative window: checkpoints keep being tried meanwhile
	if f := env.fenceXmin(t); f != stuckFence {
		t.Fatalf("checkpoint fence moved from %d to %d past the stuck event", stuckFence, f)
	}
	relay.Term(30 * time.Second)
	env.WaitSlotActive(false, 20*time.Second)

	// Written while no relay runs.
	unsent := NewLedger()
	uw := env.NewWriter(unsent)
	for i := 0; i < 20; i++ {
		if _, err := uw.Write(ctx, []string{"u-" + strconv.Itoa(i%4), "u-" + strconv.Itoa(4+i%4), "u-x", "u-y", "u-z"}, true); err != nil {
			t.Fatal(err)
		}
	}
	ageRows(t, env, `aggregate_id like 'u-%'`)

	deletable := map[string]Event{}
	for id, e := range aged {
		if _, q := quarantined[id]; !q {
			deletable[id] = e
		}
	}
	keep := union(quarantined, newer.Committed(), ghosts.Committed(), behind.Committed(), unsent.Committed())
	before := tableIDs(t, env)
	requireSameIDs(t, "before cleanup", before, union(deletable, keep))

	// The dry run counts exactly and deletes nothing.
	res := env.RunCLI(60*time.Second, nil, "cleanup", "--older-than", "1h", "--dry-run")
	wantDry := fmt.Sprintf("dry run: %d rows older than the cutoff; %d confirmed by a checkpoint; %d would be deleted; %d kept",
		len(aged)+ghosts.CommittedCount()+behind.CommittedCount()+unsent.CommittedCount(), len(aged), len(deletable),
		len(quarantined)+ghosts.CommittedCount()+behind.CommittedCount()+unsent.CommittedCount())
	if res.Code != 0 || !strings.Contains(res.Stdout, wantDry) {
		t.Fatalf("cleanup --dry-run: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", res.Code, wantDry, res.Stdout, tail(res.Stderr, 10))
	}
	requireSameIDs(t, "after the dry run", tableIDs(t, env), union(deletable, keep))

	res = env.RunCLI(2*time.Minute, nil, "cleanup", "--older-than", "1h", "--batch-size", "200", "--pause", "20ms")
	st := parseCleanup(t, res)
	t.Logf("cleanup:\n%s", res.Stdout)
	if st.rows != int64(len(deletable)) || st.batches < int64(len(deletable)/200) {
		t.Fatalf("cleanup deleted %d rows in %d batches, want %d rows in at least %d batches", st.rows, st.batches, len(deletable), len(deletable)/200)
	}
	requireSameIDs(t, "after cleanup", tableIDs(t, env), keep)
	again := parseCleanup(t, env.RunCLI(60*time.Second, nil, "cleanup", "--older-than", "1h"))
	if again.rows != 0 {
		t.Fatalf("a second cleanup deleted %d more rows", again.rows)
	}
	msg := fmt.Sprintf("TestCleanupKeepsUnconfirmed: deleted %d rows in %d batches (batch 200, pause 20ms) in %s, WAL %d bytes; kept %d (quarantined %d, newer %d, stuck %d + behind %d, unsent %d)",
		st.rows, st.batches, st.elapsed, st.wal, len(keep), len(quarantined), newer.CommittedCount(), ghosts.CommittedCount(), behind.CommittedCount(), unsent.CommittedCount())
	t.Log(msg)
	fmt.Println(msg)
}

// TestCleanupRefuses: without a checkpoint, or with one of another system
// identifier, cleanup refuses and deletes nothing; invalid options exit 2.
func TestCleanupRefuses(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := env.NewWriter(NewLedger())
	for i := 0; i < 10; i++ {
		if _, err := w.Write(ctx, []string{aggName(i)}, true); err != nil {
			t.Fatal(err)
		}
	}
	env.Exec(`update ` + env.QuotedTable() + ` set created_at = now() - interval '2 days'`)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--older-than", "0s"}, "--older-than 0s: use a positive duration"},
		{[]string{}, "--older-than 0s: use a positive duration"},
		{[]string{"--older-than", "1h", "--batch-size", "0"}, "--batch-size 0: use 1..10000"},
		{[]string{"--older-than", "1h", "--pause", "-1s"}, `--pause "-1s": negative`},
	} {
		res := env.RunCLI(30*time.Second, nil, append([]string{"cleanup"}, tc.args...)...)
		if res.Code != 2 || !strings.Contains(res.Stderr, tc.want) {
			t.Errorf("cleanup %v: exit %d, want 2 with %q\n%s", tc.args, res.Code, tc.want, res.Stderr)
		}
	}
	res := env.RunCLI(30*time.Second, []string{"OUTBOX_RELAY_OLDER_THAN=bogus"}, "cleanup")
	if res.Code != 2 || !strings.Contains(res.Stderr, "OUTBOX_RELAY_OLDER_THAN") {
		t.Errorf("cleanup with a bad env fallback: exit %d\n%s", res.Code, res.Stderr)
	}

	res = env.RunCLI(30*time.Second, nil, "cleanup", "--older-than", "1h")
	if res.Code != 1 || !strings.Contains(res.Stderr, "has no checkpoint") || !strings.Contains(res.Stderr, "outbox-relay run") {
		t.Fatalf("cleanup without a checkpoint: exit %d, want 1 naming the missing checkpoint and the fix\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(res.Stderr))
	// A checkpoint of another cluster, whose fence would allow everything.
	env.Exec(`insert into public.outbox_relay_checkpoint (outbox_table, slot, lsn, system_identifier, timeline,
		fence_lsn, fence_xmin, fence_xmax, fence_at)
		values ($1, $2, '0/1', '42', 1, '0/1', txid_current() + 1000, txid_current() + 1000, now())`, env.Table, env.Slot)
	t.Cleanup(func() {
		env.Exec(`delete from public.outbox_relay_checkpoint where outbox_table = $1`, env.Table)
	})
	res = env.RunCLI(30*time.Second, nil, "cleanup", "--older-than", "1h")
	if res.Code != 1 || !strings.Contains(res.Stderr, "another system identifier") || !strings.Contains(res.Stderr, "refused") {
		t.Fatalf("cleanup with a foreign checkpoint: exit %d, want 1 with \"another system identifier\" and \"refused\"\n%s", res.Code, res.Stderr)
	}
	if n := len(tableIDs(t, env)); n != 10 {
		t.Fatalf("%d rows left after refused cleanups, want 10", n)
	}
}

// metricValue reads one unlabelled sample from a relay's /metrics.
func metricValue(t *testing.T, addr, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

// TestCleanupLeaderSchedule: the leader's schedule deletes rows while the
// relay streams under load; while an event is stuck on a missing topic,
// nothing committed after it is deleted; once the topic exists everything
// is delivered (nothing lost) and the table drains to empty.
func TestCleanupLeaderSchedule(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relay := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms", "OUTBOX_RELAY_HEARTBEAT_INTERVAL=200ms",
		"OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m", "OUTBOX_RELAY_METRICS_ADDR="+addr,
		"OUTBOX_RELAY_CLEANUP_OLDER_THAN=2s", "OUTBOX_RELAY_CLEANUP_INTERVAL=500ms")
	c := StartConsumer(t, env.Topic, env.Partitions)
	// A standby with the same schedule never cleans.
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) }) {
		t.Fatalf("relay not streaming\n%s", relay.LogTail(20))
	}
	standbyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	standby := env.StartRelay("OUTBOX_RELAY_METRICS_ADDR="+standbyAddr, "OUTBOX_RELAY_CLEANUP_OLDER_THAN=2s", "OUTBOX_RELAY_CLEANUP_INTERVAL=500ms")
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	stop := backgroundWriter(t, w, 5, 5*time.Millisecond)
	if !within(60*time.Second, 200*time.Millisecond, func() bool { return metricValue(t, addr, "outbox_relay_cleanup_deleted_rows_total") >= 2000 }) {
		stop()
		t.Fatalf("the leader's schedule deleted fewer than 2000 rows within 60s\n%s", relay.LogTail(20))
	}
	stop()

	// Stuck: nothing committed after the ghost event may be deleted.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	gw := env.NewWriter(NewLedger())
	gw.AggregateType = "ghost"
	ghost, err := gw.Write(ctx, []string{"g-1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	afterLedger := NewLedger()
	aw := env.NewWriter(afterLedger)
	aw.versions = w.versions
	stop = backgroundWriter(t, aw, 6, 5*time.Millisecond)
	deletedAtStuck := metricValue(t, addr, "outbox_relay_cleanup_deleted_rows_total")
	time.Sleep(6 * time.Second) // wall-clock: a negative window: 12 cleanup runs with everything older than 2s
	stop()
	ids := tableIDs(t, env)
	for id, e := range union(afterLedger.Committed(), idsOf(ghost)) {
		if !ids[id] {
			t.Fatalf("event %s (%s/%s) committed after the stuck event was deleted before it was confirmed", id, e.AggregateType, e.AggregateID)
		}
	}
	t.Logf("while stuck: %d events after the stuck one all kept; %.0f rows deleted before", afterLedger.CommittedCount(), deletedAtStuck)

	// Unstick: the ghost topic appears, everything is delivered, and the
	// schedule then drains the table.
	env.CreateTopic(ctx, "it."+env.Sfx+".ghost", 1)
	gc := StartConsumer(t, "it."+env.Sfx+".ghost", 1)
	all := union(ledger.Committed(), afterLedger.Committed())
	if !c.WaitFor(all, 60*time.Second, time.Second) || !gc.WaitFor(idsOf(ghost), 60*time.Second, 0) {
		t.Fatalf("not every event delivered after the topic appeared")
	}
	rep := c.Check(all, CheckOptions{TimestampSkew: 5 * time.Second})
	RequireOK(t, rep)
	if !within(60*time.Second, 250*time.Millisecond, func() bool { return len(tableIDs(t, env)) == 0 }) {
		t.Fatalf("the table still holds %d rows 60s after everything was delivered\n%s", len(tableIDs(t, env)), relay.LogTail(20))
	}
	runs := relay.LogLines(`"message":"cleanup run"`, 100000)
	var last map[string]any
	if len(runs) > 0 {
		_ = json.Unmarshal([]byte(runs[len(runs)-1]), &last)
	}
	// The counter moves after a batch's DELETE commits, so an empty table
	// can be seen a moment before it counts the last batch (ci34: 4338 of
	// 4361): wait for it to reach the count, then require it exactly.
	var deleted float64
	within(10*time.Second, 100*time.Millisecond, func() bool {
		deleted = metricValue(t, addr, "outbox_relay_cleanup_deleted_rows_total")
		return int(deleted) >= len(all)+1
	})
	if !standby.LogContains("standby") || metricValue(t, standbyAddr, `outbox_relay_cleanup_runs_total{result="ok"}`) != 0 ||
		metricValue(t, standbyAddr, "outbox_relay_cleanup_deleted_rows_total") != 0 {
		t.Errorf("the standby ran cleanup (runs ok %.0f, rows %.0f) or was not a standby\n%s",
			metricValue(t, standbyAddr, `outbox_relay_cleanup_runs_total{result="ok"}`), metricValue(t, standbyAddr, "outbox_relay_cleanup_deleted_rows_total"), standby.LogTail(10))
	}
	if int(deleted) != len(all)+1 {
		t.Errorf("outbox_relay_cleanup_deleted_rows_total %.0f, want %d (every committed row once)", deleted, len(all)+1)
	}
	msg := fmt.Sprintf("TestCleanupLeaderSchedule: committed %d, delivered %d (lost %d, dups %d); %d cleanup runs logged, %.0f rows deleted by the schedule; %d events behind a stuck one kept until confirmed; last run %v",
		len(all)+1, rep.Delivered, len(rep.Lost), rep.Duplicates, len(runs), deleted, afterLedger.CommittedCount(), last)
	t.Log(msg)
	fmt.Println(msg)
}

// TestCleanupPartitioned: a partitioned outbox (range on created_at)
// streams through the relay (publication via the root, set by migrate on an
// existing publication), and cleanup drops the old partition whole, falls
// back to row deletes where a row is dead-lettered or in the default
// partition, and leaves the current partition alone; the relay streams on.
func TestCleanupPartitioned(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoMigrate: true})
	dlCleanup(t, env)
	day := 24 * time.Hour
	now := time.Now().UTC().Truncate(time.Hour)
	ts := func(d time.Time) string { return d.Format(time.RFC3339) }
	q := env.QuotedTable()
	part := func(name string) string { return pgx.Identifier{"public", env.TableName + "_" + name}.Sanitize() }
	env.Exec(`create table ` + q + ` (
		event_id uuid not null, aggregate_type text not null, aggregate_id text not null, aggregate_version bigint not null,
		event_type text not null, schema_version int not null, payload jsonb not null, headers jsonb,
		created_at timestamptz not null default now(), primary key (event_id, created_at)
	) partition by range (created_at)`)
	env.Exec(fmt.Sprintf(`create table %s partition of %s for values from ('%s') to ('%s')`, part("p0"), q, ts(now.Add(-3*day)), ts(now.Add(-2*day))))
	env.Exec(fmt.Sprintf(`create table %s partition of %s for values from ('%s') to ('%s')`, part("p1"), q, ts(now.Add(-2*day)), ts(now.Add(-day))))
	env.Exec(fmt.Sprintf(`create table %s partition of %s for values from ('%s') to ('%s')`, part("p2"), q, ts(now.Add(-day)), ts(now.Add(day))))
	env.Exec(`create table ` + part("default") + ` partition of ` + q + ` default`)
	// A publication without publish_via_partition_root: migrate must fix it.
	env.Exec(`create publication ` + pgx.Identifier{env.Publication}.Sanitize() + ` for table ` + q + ` with (publish = 'insert')`)
	// Before migrate: doctor fails it, and run refuses to stream (its events
	// would arrive under the partitions' names and be skipped).
	if doc := env.RunCLI(60*time.Second, nil, "doctor", "--topics", env.Topic); doc.Code != 1 || !strings.Contains(doc.Stdout, "FAIL  partitioned outbox") {
		t.Errorf("doctor before migrate: exit %d, want 1 with FAIL  partitioned outbox\n%s", doc.Code, doc.Stdout)
	}
	early := env.StartRelay()
	if code, exited := early.Wait(30 * time.Second); !exited || code != 1 || !early.LogContains("lacks publish_via_partition_root") {
		t.Fatalf("run on a partitioned outbox without publish_via_partition_root: exited=%v code=%d, want 1 naming it\n%s", exited, code, early.LogTail(10))
	}
	env.Migrate()
	var viaRoot bool
	if err := env.DB.QueryRow(context.Background(), `select pubviaroot from pg_publication where pubname = $1`, env.Publication).Scan(&viaRoot); err != nil || !viaRoot {
		t.Fatalf("after migrate: pubviaroot = %v (%v), want true", viaRoot, err)
	}
	relay := env.StartRelay("OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms", "OUTBOX_RELAY_HEARTBEAT_INTERVAL=200ms")
	c := StartConsumer(t, env.Topic, env.Partitions)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Rows per partition, with explicit created_at.
	w := env.NewWriter(NewLedger())
	insertAt := func(evs []Event, at time.Time, headers string) {
		t.Helper()
		for _, e := range evs {
			h := headers
			if h == "" {
				h = fmt.Sprintf(`{"trace_id": %q}`, e.TraceID)
			}
			env.Exec(`insert into `+q+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers, created_at)
				values ($1, $2, $3, $4, $5, $6, '{"note": "partitioned"}', $7::jsonb, $8)`,
				e.ID, e.AggregateType, e.AggregateID, e.Version, e.EventType, e.SchemaVersion, h, at)
		}
	}
	gen := func(prefix string, n int) []Event {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("%s-%d", prefix, i%7)
		}
		return w.NextEvents(ids)
	}
	p0 := gen("p0", 300)
	p1 := gen("p1", 200)
	p1poison := w.NextEvents([]string{"p1-poisoned"})
	p2old := gen("p2", 50)  // in the current partition, older than the cutoff
	p2new := gen("p2n", 50) // in the current partition, young
	def := gen("def", 40)   // default partition, long ago
	insertAt(p0, now.Add(-2*day-12*time.Hour), "")
	insertAt(p1, now.Add(-day-12*time.Hour), "")
	insertAt(p1poison, now.Add(-day-12*time.Hour), `{"bad": 1}`)
	insertAt(p2old, now.Add(-18*time.Hour), "")
	insertAt(p2new, time.Now(), "")
	insertAt(def, now.Add(-30*day), "")
	healthy := idsOf(p0, p1, p2old, p2new, def)
	if !c.WaitFor(healthy, 60*time.Second, time.Second) {
		t.Fatalf("the partitioned outbox's events did not all arrive (%d of %d)\n%s", c.Count(), len(healthy), relay.LogTail(20))
	}
	waitDL(t, env, "p1-poisoned", 30*time.Second, "1 dead", func(r []dlRow) bool { return len(r) == 1 })
	var xid int64
	if err := env.DB.QueryRow(ctx, `select txid_current()`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.fenceXmin(t) > xid }) {
		t.Fatalf("checkpoint fence %d did not pass xid %d", env.fenceXmin(t), xid)
	}
	ageHistory(t, env, xid, "2 days")

	dry := env.RunCLI(60*time.Second, nil, "cleanup", "--older-than", "12h", "--dry-run")
	if dry.Code != 0 || !strings.Contains(dry.Stdout, "would drop partition public."+env.TableName+"_p0 (300 rows)") ||
		strings.Contains(dry.Stdout, "_p1 (") {
		t.Fatalf("cleanup --dry-run: exit %d, want p0 (300 rows) and only p0 to be dropped\n%s\n%s", dry.Code, dry.Stdout, tail(dry.Stderr, 10))
	}
	res := env.RunCLI(2*time.Minute, nil, "cleanup", "--older-than", "12h", "--batch-size", "50")
	st := parseCleanup(t, res)
	t.Logf("cleanup:\n%s", res.Stdout)
	var exists bool
	if err := env.DB.QueryRow(ctx, `select to_regclass($1) is not null`, part("p0")).Scan(&exists); err != nil || exists {
		t.Fatalf("partition p0 still exists after cleanup (%v)", err)
	}
	if st.partitions != 1 || st.rows != int64(len(p1)+len(p2old)+len(def)) || !strings.Contains(res.Stdout, "_p1: 1 of 201 rows not yet confirmed or dead-lettered") {
		t.Fatalf("cleanup: %d partitions dropped, %d rows deleted; want 1 and %d, with p1 kept for its dead-lettered row", st.partitions, st.rows, len(p1)+len(p2old)+len(def))
	}
	requireSameIDs(t, "after cleanup", tableIDs(t, env), idsOf(p1poison, p2new))

	// The relay streams on through the root after the drop.
	more := gen("p2m", 30)
	insertAt(more, time.Now(), "")
	if !c.WaitFor(idsOf(more), 30*time.Second, 0) {
		t.Fatalf("events written after the partition drop did not arrive\n%s", relay.LogTail(20))
	}
	doc := env.RunCLI(60*time.Second, nil, "doctor", "--topics", env.Topic)
	if !strings.Contains(doc.Stdout, "PASS  partitioned outbox") {
		t.Errorf("doctor does not pass the partitioned outbox:\n%s", doc.Stdout)
	}
	msg := fmt.Sprintf("TestCleanupPartitioned: dropped %d partition (300 rows), deleted %d rows in %d batches in %s, WAL %d bytes; kept the poisoned row and %d young rows; relay streamed on",
		st.partitions, st.rows, st.batches, st.elapsed, st.wal, len(p2new))
	t.Log(msg)
	fmt.Println(msg)
}
