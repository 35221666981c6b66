//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/replication"
)

// The failover tests run one primary and one physical standby of the
// PostgreSQL under test (OUTBOX_RELAY_TEST_PG_BIN), the relay with a URL
// naming both (target_session_attrs=read-write), and writers committing
// through the same kind of URL, then crash the primary (pg_ctl stop -m
// immediate) and promote the standby.
//
// What counts: the events the writers saw committed AND that the new
// primary's outbox holds. Events committed on the old primary but never
// replicated to the standby are the application's loss (asynchronous
// replication), counted and printed apart; they are not the relay's.

// failoverPhysicalSlot is the standby's physical slot on the primary.
const failoverPhysicalSlot = "failover_standby"

// failoverRig is the pair, the Env on it, the relay, the consumer and the
// writers of one failover test.
type failoverRig struct {
	t        *testing.T
	major    int
	primary  *TempCluster
	standby  *TempCluster
	env      *Env
	consumer *Consumer
	ledger   *Ledger
	// cli is the environment of every outbox-relay command: the slot's
	// failover flag (--failover-slot).
	cli     []string
	writing *chaos // its writer/commit: retries across the outage, resolves ambiguous commits on the new primary
	stop    atomic.Bool
	wg      sync.WaitGroup
	// crashed is when the primary was told to crash, dead when it was gone.
	crashed, dead time.Time
	// promoteDelay is how long after the crash the standby is promoted:
	// zero for at once; an HA manager's failure detection takes longer.
	promoteDelay time.Duration
	// promoted is when the standby's promotion had finished.
	promoted time.Time
	// round names the aggregates of writers started again after
	// stopWriters: new ones, whose versions start at 1 again.
	round int
}

// newFailoverRig starts the pair and migrates the outbox through the
// multi-host URL. With slotSync, the standby synchronizes failover slots
// (sync_replication_slots), the primary's logical walsenders wait for it
// (synchronized_standby_slots), and migrate creates a failover slot (its
// default on 17+); without, every command runs with --failover-slot=false.
func newFailoverRig(t *testing.T, slotSync bool) *failoverRig {
	t.Helper()
	bin := testPGBin(t)
	major := testPGMajor(t, bin)
	if slotSync && major < 17 {
		t.Skipf("failover slots need PostgreSQL 17 or later; OUTBOX_RELAY_TEST_PG_BIN=%s is PostgreSQL %d", bin, major)
	}
	p := StartTempClusterBin(t, bin, "wal_level=logical")
	settings := []string{"hot_standby_feedback=on"}
	if slotSync {
		settings = append(settings, "sync_replication_slots=on")
	}
	s := p.StartStandby(t, failoverPhysicalSlot, settings...)
	if slotSync {
		p.Exec(t, `ALTER SYSTEM SET synchronized_standby_slots = '`+failoverPhysicalSlot+`'`)
		p.Exec(t, `SELECT pg_reload_conf()`)
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", p.Port, s.Port)
	requireWritableChosen(t, p, s)
	cli := []string{fmt.Sprintf("OUTBOX_RELAY_FAILOVER_SLOT=%t", slotSync)}
	r := &failoverRig{t: t, major: major, primary: p, standby: s, env: pairEnv(t, url, cli), ledger: NewLedger(), cli: cli}
	if major >= 17 {
		flag := p.Query(t, "postgres", `SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1`, r.env.Slot)
		if flag != fmt.Sprint(slotSync) {
			t.Fatalf("slot %s created by migrate with %s has failover = %s", r.env.Slot, cli[0], flag)
		}
	}
	r.writing = &chaos{t: t, env: r.env, ledger: r.ledger}
	r.writing.cfg.MaxTxEvents, r.writing.cfg.TxInterval = 3, 10*time.Millisecond
	r.consumer = StartConsumer(t, r.env.Topic, r.env.Partitions)
	return r
}

// requireWritableChosen checks that target_session_attrs=read-write skips
// the standby, which accepts replication connections too, for the
// relay's replication connection and its sessions, in both forms of a
// multi-host connection string, even with the standby named first.
func requireWritableChosen(t *testing.T, primary, standby *TempCluster) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := fmt.Sprintf("127.0.0.1:%d", primary.Port)
	for _, dsn := range []string{
		fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", standby.Port, primary.Port),
		fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres dbname=postgres sslmode=disable target_session_attrs=read-write", standby.Port, primary.Port),
	} {
		repl, err := replication.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("replication connection with %s: %v", dsn, err)
		}
		got := repl.Conn().RemoteAddr().String()
		repl.Close(ctx)
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatalf("connect with %s: %v", dsn, err)
		}
		gotSQL := conn.PgConn().Conn().RemoteAddr().String()
		conn.Close(ctx)
		if got != want || gotSQL != want {
			t.Fatalf("%s: replication connection to %s, session to %s; want the primary %s", dsn, got, gotSQL, want)
		}
	}
}

// pairEnv is an Env whose database is the temp pair behind url: NewEnv's
// topic and clean-up (which, registered after the clusters', runs while
// they are up), with the pool and the relay's URL swapped. It runs migrate
// with the extra environment.
func pairEnv(t testing.TB, url string, extra []string) *Env {
	t.Helper()
	env := NewEnv(t, EnvOptions{NoMigrate: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := OpenDB(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	env.DB.Close()
	env.DB, env.DatabaseURL = db, url
	if res := env.RunCLI(60*time.Second, extra, "migrate"); res.Code != 0 {
		t.Fatalf("outbox-relay migrate: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	return env
}

// startRelay runs the relay on the pair's URL.
func (r *failoverRig) startRelay() *Relay {
	return r.env.StartRelay(append([]string{"OUTBOX_RELAY_CHECKPOINT_INTERVAL=200ms"}, r.cli...)...)
}

// start starts the relay and 4 writers, and waits until Kafka holds n
// records.
func (r *failoverRig) start(n int) *Relay {
	r.t.Helper()
	relay := r.startRelay()
	r.startWriters(4)
	if !r.consumer.WaitCount(n, 30*time.Second) {
		r.t.Fatalf("fewer than %d records within 30s\n%s", n, relay.LogTail(20))
	}
	return relay
}

// startWriters starts n writers, each over its own 5 aggregates, so
// aggregate versions rise in commit order. A failed test stops them
// before the Env's clean-up drops the table.
func (r *failoverRig) startWriters(n int) {
	r.t.Cleanup(func() {
		r.stop.Store(true)
		r.wg.Wait()
	})
	for w := range n {
		own := make([]string, 5)
		for i := range own {
			own[i] = fmt.Sprintf("w%d-agg-%d", w, i)
			if r.round > 0 {
				own[i] = fmt.Sprintf("r%d-%s", r.round, own[i])
			}
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.writing.writer(context.Background(), &r.stop, own, int64(w+1))
		}()
	}
}

// stopWriters stops the writers and waits for them.
func (r *failoverRig) stopWriters() {
	r.stop.Store(true)
	r.wg.Wait()
	r.t.Logf("writers: %s", &r.writing.stats)
}

// crash stops the primary with -m immediate and promotes the standby.
func (r *failoverRig) crash() {
	r.t.Helper()
	r.crashed = time.Now()
	r.primary.Stop(r.t, "immediate")
	r.dead = time.Now()
	// wall-clock: the promotion's delay after the crash is the case under test
	time.Sleep(r.promoteDelay)
	r.standby.Promote(r.t)
	r.promoted = time.Now()
	r.t.Logf("primary crashed (%s), standby promoted %s after the crash", r.dead.Sub(r.crashed).Round(time.Millisecond), time.Since(r.crashed).Round(time.Millisecond))
}

// waitFirstFromNewPrimary waits until Kafka holds an event committed after
// the old primary was gone, and returns the time from the crash to it.
func (r *failoverRig) waitFirstFromNewPrimary(timeout time.Duration) time.Duration {
	r.t.Helper()
	var first time.Time
	ok := within(timeout, 50*time.Millisecond, func() bool {
		committed := r.ledger.Committed()
		for _, rec := range r.consumer.Records() {
			ev, found := committed[rec.EventID()]
			if found && ev.CommitTime.After(r.dead) && (first.IsZero() || rec.Seen.Before(first)) {
				first = rec.Seen
			}
		}
		return !first.IsZero()
	})
	if !ok {
		r.t.Fatalf("no event committed on the new primary reached Kafka within %s of the promotion", timeout)
	}
	return first.Sub(r.crashed)
}

// requireLockOnNewPrimary checks that the relay campaigned again after the
// crash and holds the leader lock on the new primary before it streamed
// there: the lock on the old primary died with it.
func (r *failoverRig) requireLockOnNewPrimary(db *DB, relay *Relay) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var holders int
	err := db.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND a.application_name = 'outbox-relay-leader'`).Scan(&holders)
	if err != nil || holders != 1 {
		r.t.Fatalf("leader locks held on the new primary: %d (%v), want 1", holders, err)
	}
	// After the crash: a lock acquisition first, then streaming.
	var after, story []string
	for _, line := range strings.Split(relay.Log(), "\n") {
		var l struct {
			Time    time.Time `json:"time"`
			Level   string    `json:"level"`
			Message string    `json:"message"`
			Error   string    `json:"error"`
		}
		if json.Unmarshal([]byte(line), &l) != nil || !l.Time.After(r.crashed) {
			continue
		}
		if l.Level != "debug" && len(story) < 20 {
			story = append(story, fmt.Sprintf("+%s %s %s", l.Time.Sub(r.crashed).Round(time.Millisecond), l.Message, l.Error))
		}
		if l.Message == "lock acquired: leading" || l.Message == "streaming" {
			after = append(after, l.Message)
		}
	}
	r.t.Logf("the relay after the crash:\n%s", strings.Join(story, "\n"))
	if len(after) < 2 || after[0] != "lock acquired: leading" || after[1] != "streaming" {
		r.t.Fatalf("after the crash the relay logged %q: it must take the lock on the new primary before streaming there", after)
	}
}

// waitFencedCheckpoint waits until the standby holds a checkpoint of the
// relay with a fence (the xid bound recover back-fills from): the saver
// attaches a fence only once the acknowledged position passed one, which
// under load takes a few checkpoint intervals after the start.
func (r *failoverRig) waitFencedCheckpoint(timeout time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout+10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, r.standby.URL)
	if err != nil {
		r.t.Fatal(err)
	}
	defer pool.Close()
	store := checkpoint.NewStore(pool, migrations.Table{Schema: "public", Name: r.env.TableName}, r.env.Slot)
	var cp checkpoint.Checkpoint
	if !within(timeout, 100*time.Millisecond, func() bool {
		cp, err = store.Latest(ctx)
		return err == nil && cp.Fence != nil
	}) {
		r.t.Fatalf("no checkpoint with a fence on the standby within %s: %+v, %v", timeout, cp, err)
	}
}

// newPrimaryDB opens the promoted standby directly.
func (r *failoverRig) newPrimaryDB() *DB {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := OpenDB(ctx, r.standby.URL)
	if err != nil {
		r.t.Fatalf("connect to the new primary: %v", err)
	}
	r.t.Cleanup(db.Close)
	return db
}

// confirmedOnNewPrimary is the slot's confirmed_flush_lsn on the new primary.
func (r *failoverRig) confirmedOnNewPrimary(db *DB) LSN {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := Slot(ctx, db, r.env.Slot)
	if err != nil || !s.Exists {
		r.t.Fatalf("slot %s on the new primary: exists=%v, %v", r.env.Slot, s.Exists, err)
	}
	return s.ConfirmedFlushLSN
}

// failoverResult splits the ledger by what the new primary holds and
// checks Kafka against the events that count.
type failoverResult struct {
	report *Report
	// appLost: committed on the old primary, missing on the new one;
	// appLostPublished: those of them the relay published anyway.
	appLost, appLostPublished int
}

func (f failoverResult) String() string {
	return fmt.Sprintf("%s application_lost=%d (published from the old primary: %d)", f.report, f.appLost, f.appLostPublished)
}

// settle stops the writers, waits until every event that counts reached
// Kafka and checks them: none lost, no inversion per aggregate.
func (r *failoverRig) settle(db *DB, timeout time.Duration) failoverResult {
	r.t.Helper()
	r.stopWriters()
	onNew := ExpectedFromTable(r.t, db, r.env.QuotedTable())
	expected := map[string]Event{}
	lost := map[string]bool{}
	for id, ev := range r.ledger.Committed() {
		if _, ok := onNew[id]; ok {
			expected[id] = ev
		} else {
			lost[id] = true
		}
	}
	r.consumer.WaitFor(expected, timeout, time.Second)
	// Only the events that count are checked: the application's lost
	// ones, and rows of writes the writers gave up on, are set aside.
	var records []Record
	res := failoverResult{appLost: len(lost)}
	for _, rec := range r.consumer.Records() {
		id := rec.EventID()
		if lost[id] {
			res.appLostPublished++
			continue
		}
		if _, counted := expected[id]; counted || id == "" {
			records = append(records, rec)
		}
	}
	res.report = CheckRecords(records, r.env.Partitions, expected, CheckOptions{})
	if !res.report.OK() {
		r.t.Fatalf("after the failover: %s", res)
	}
	return res
}

// finish lets the writers go on for a while on the new primary (db), then
// settles, and checks that the slot's confirmed_flush_lsn there advanced
// past the end of the writes (early: where it was at the start).
func (r *failoverRig) finish(db *DB) (res failoverResult, early, confirmed LSN) {
	r.t.Helper()
	early = r.confirmedOnNewPrimary(db)
	// wall-clock: the writers go on for a while on the new primary
	time.Sleep(2 * time.Second)
	res = r.settle(db, 30*time.Second)
	return res, early, r.waitConfirmedPast(db, early, 20*time.Second)
}

// waitConfirmedPast waits until the slot on the new primary confirmed
// the WAL written up to now (the writers have stopped).
func (r *failoverRig) waitConfirmedPast(db *DB, before LSN, timeout time.Duration) LSN {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	var insert string
	err := db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&insert)
	cancel()
	if err != nil {
		r.t.Fatal(err)
	}
	target, _ := ParseLSN(insert)
	var got LSN
	if !within(timeout, 100*time.Millisecond, func() bool {
		got = r.confirmedOnNewPrimary(db)
		return got >= target && got > before
	}) {
		r.t.Fatalf("confirmed_flush_lsn on the new primary is %s, not past %s (insert position after the last commit) and %s", got, target, before)
	}
	return got
}

// TestPrimaryFailoverSlotSync: PostgreSQL 17+ failover slots. The slot is
// synchronized to the standby; after the primary crashes and the standby
// is promoted, the relay (following the multi-host URL) resumes on the new
// primary without operator action: nothing that reached the new primary is
// lost or reordered, and the relay never published what the standby had
// not received (synchronized_standby_slots).
func TestPrimaryFailoverSlotSync(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	r := newFailoverRig(t, true)
	relay := r.start(200)
	// The synced slot stays temporary, and is dropped at promotion, until
	// it has decoded a running-transactions record past the standby's
	// catalog xmin: log one now rather than waiting for the bgwriter.
	synced := func() bool {
		r.primary.Exec(t, `SELECT pg_log_standby_snapshot()`)
		return r.standby.Query(t, "postgres", standbySlotSynced, r.env.Slot) == "true"
	}
	if !within(30*time.Second, 200*time.Millisecond, synced) {
		t.Fatalf("slot %s not synchronized (and persistent) on the standby within 30s: %s", r.env.Slot,
			r.standby.Query(t, "postgres", standbySlotSynced, r.env.Slot))
	}
	time.Sleep(time.Second) // wall-clock: load flows, so more is in flight at the crash
	r.crash()
	took := r.waitFirstFromNewPrimary(45 * time.Second)
	if !relay.Running() {
		t.Fatalf("the relay exited after the failover (code %d):\n%s", relay.exitCode, relay.LogTail(20))
	}
	db := r.newPrimaryDB()
	r.requireLockOnNewPrimary(db, relay)
	res, early, confirmed := r.finish(db)
	if res.appLostPublished != 0 {
		t.Fatalf("the relay published %d events the standby never received: synchronized_standby_slots must prevent that", res.appLostPublished)
	}
	t.Logf("TestPrimaryFailoverSlotSync (PostgreSQL %d): crash to first event from the new primary %s; %s; confirmed_flush_lsn on the new primary %s -> %s",
		r.major, took.Round(time.Millisecond), res, early, confirmed)
}

// TestPrimaryFailoverWithoutSlotSync: no failover slot (PostgreSQL 15,
// 16, or 17+ with failover = false). After the promotion the slot is gone:
// the relay stops and refuses to start, naming outbox-relay recover; recover
// on the new primary back-fills, and nothing that reached the new primary
// is lost or reordered.
func TestPrimaryFailoverWithoutSlotSync(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	r := newFailoverRig(t, false)
	relay := r.start(300)
	r.waitFencedCheckpoint(20 * time.Second)
	r.crash()
	code, exited := relay.Wait(45 * time.Second)
	if !exited || code != 1 || !relay.LogContains("outbox-relay recover") {
		t.Fatalf("relay after a failover without the slot: exited=%v code=%d, want exit 1 naming outbox-relay recover\n%s", exited, code, relay.LogTail(15))
	}
	stopped := time.Since(r.crashed)
	again := r.startRelay()
	if code, exited := again.Wait(30 * time.Second); !exited || code != 1 || !again.LogContains("outbox-relay recover") {
		t.Fatalf("run on the new primary without the slot: exited=%v code=%d, want exit 1 naming outbox-relay recover\n%s", exited, code, again.LogTail(15))
	}
	res := r.env.RunCLI(90*time.Second, r.cli, "recover", "--no-run")
	t.Logf("recover: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 || !strings.Contains(res.Stdout, "back-filled") {
		t.Fatalf("recover: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	resumed := r.startRelay()
	took := r.waitFirstFromNewPrimary(45 * time.Second)
	out, early, confirmed := r.finish(r.newPrimaryDB())
	if !resumed.Running() {
		t.Fatalf("the relay exited after recover (code %d):\n%s", resumed.exitCode, resumed.LogTail(20))
	}
	t.Logf("TestPrimaryFailoverWithoutSlotSync (PostgreSQL %d): relay stopped %s after the crash; crash to first event from the new primary %s (recover included); %s; confirmed_flush_lsn on the new primary %s -> %s",
		r.major, stopped.Round(time.Millisecond), took.Round(time.Millisecond), out, early, confirmed)
}

// TestFailoverSlotStandbyDown: with synchronized_standby_slots naming a
// standby that is down, the relay publishes nothing committed after the
// standby went away (it would be lost by a failover to that standby), and
// the slot does not confirm past it; the relay stays up, and once the
// standby is back it catches up with nothing lost.
func TestFailoverSlotStandbyDown(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	r := newFailoverRig(t, true)
	relay := r.start(200)
	db := r.env.DB
	r.standby.Stop(t, "fast")
	down := time.Now()
	held := r.confirmedOnNewPrimary(db) // the primary: nothing was promoted
	// wall-clock: the standby's outage; nothing committed in it may reach Kafka (negative check)
	time.Sleep(3 * time.Second)
	// Allow what the standby received just before it stopped.
	margin := down.Add(500 * time.Millisecond)
	committed := r.ledger.Committed()
	var leaked, after int
	for _, ev := range committed {
		if ev.CommitTime.After(margin) {
			after++
		}
	}
	for _, rec := range r.consumer.Records() {
		if ev, ok := committed[rec.EventID()]; ok && ev.CommitTime.After(margin) {
			leaked++
		}
	}
	confirmed := r.confirmedOnNewPrimary(db)
	if after == 0 {
		t.Fatal("the writers committed nothing while the standby was down")
	}
	if leaked > 0 {
		t.Fatalf("%d of the %d events committed while the standby was down reached Kafka: synchronized_standby_slots must hold them back", leaked, after)
	}
	if !relay.Running() {
		t.Fatalf("the relay exited while the standby was down (code %d):\n%s", relay.exitCode, relay.LogTail(20))
	}
	t.Logf("standby down: %d events committed, none published; confirmed_flush_lsn %s -> %s", after, held, confirmed)
	r.standby.Start(t)
	back := time.Now()
	res, _, end := r.finish(db)
	t.Logf("TestFailoverSlotStandbyDown (PostgreSQL %d): standby back; writes went on for 2 s more and everything settled %s after the restart; %s; confirmed_flush_lsn %s",
		r.major, time.Since(back).Round(time.Millisecond), res, end)
}
