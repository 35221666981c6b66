//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/inbox/inboxprom"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

var shippingBuild struct {
	once sync.Once
	path string
	err  error
}

// shippingBin builds examples/shipping once per test binary.
func shippingBin(t testing.TB) string {
	t.Helper()
	shippingBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "outbox-relay-it-shipping-")
		if err != nil {
			shippingBuild.err = err
			return
		}
		path := filepath.Join(dir, "shipping")
		cmd := exec.Command("go", "build", "-o", path, "./examples/shipping")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			shippingBuild.err = fmt.Errorf("build examples/shipping: %v\n%s", err, out)
			return
		}
		shippingBuild.path = path
	})
	if shippingBuild.err != nil {
		t.Fatal(shippingBuild.err)
	}
	return shippingBuild.path
}

// Proc is a subprocess whose combined output goes to a file.
type Proc struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	out  string
	done chan struct{}
	err  error
}

// StartProc starts bin args with env; a cleanup kills it if still running.
func StartProc(t testing.TB, name, bin string, env []string, args ...string) *Proc {
	t.Helper()
	out := filepath.Join(t.TempDir(), name+".log")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = env, f, f, repoRoot
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Proc{t: t, name: name, cmd: cmd, out: out, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); f.Close(); close(p.done) }()
	t.Logf("%s started: pid %d, log %s", name, cmd.Process.Pid, out)
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output tail:\n%s", name, tail(p.Output(), 40))
		}
	})
	return p
}

// Output is what the process printed so far.
func (p *Proc) Output() string { b, _ := os.ReadFile(p.out); return string(b) }

// Kill9 sends SIGKILL and waits for the exit.
func (p *Proc) Kill9() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.t.Logf("%s killed with SIGKILL", p.name)
}

// Wait waits up to d for the exit and returns the exit error (nil: status 0).
func (p *Proc) Wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		p.t.Fatalf("%s did not exit within %s\n%s", p.name, d, tail(p.Output(), 30))
		return nil
	}
}

var shippingDone = regexp.MustCompile(`shipping: done: applied (\d+), duplicates absorbed (\d+), dead-lettered (\d+), parked (\d+), offset commits (\d+); shipments in table (\d+), shipments counter (\d+)`)

// shippingTotals parses the final line of examples/shipping.
type shippingTotals struct{ applied, duplicates, dead, parked, commits, shipments, counter int }

func parseShipping(t testing.TB, out string) shippingTotals {
	t.Helper()
	m := shippingDone.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no final totals line in shipping output:\n%s", tail(out, 30))
	}
	n := make([]int, 7)
	for i := range n {
		n[i], _ = strconv.Atoi(m[i+1])
	}
	return shippingTotals{n[0], n[1], n[2], n[3], n[4], n[5], n[6]}
}

// inboxSchema creates a per-test schema name and drops it at cleanup.
func inboxSchema(t testing.TB, env *Env) string {
	schema := "inbox_" + env.Sfx
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		db, err := OpenDB(ctx, databaseURL)
		if err != nil {
			return
		}
		defer db.Close()
		if _, err := db.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
			t.Logf("cleanup: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// committedOffsets returns the group's committed offset per partition (-1: none).
func committedOffsets(t testing.TB, group, topic string, partitions int) []int64 {
	t.Helper()
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := kafkaClient().OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		t.Fatalf("offset fetch %s: %v", group, err)
	}
	out := make([]int64, partitions)
	for i := range out {
		out[i] = -1
	}
	for _, p := range resp.Topics[topic] {
		out[p.Partition] = p.CommittedOffset
	}
	return out
}

func countRows(t testing.TB, db *DB, sql string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestInboxKill9BetweenCommits runs the whole path (outbox → relay → Kafka
// → examples/shipping with the inbox) and kills the consumer with SIGKILL
// after PostgreSQL committed every effect but before any offset was
// committed: the restarted consumer gets every event again and applies
// none twice. A second kill mid-stream, with frequent offset commits,
// loses nothing either.
func TestInboxKill9BetweenCommits(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	env := NewEnv(t, EnvOptions{})
	schema := inboxSchema(t, env)
	env.StartRelay()
	bin := shippingBin(t)
	consumer := "shipping_" + env.Sfx
	procEnv := processEnv([]string{"OUTBOX_RELAY_DATABASE_URL=" + databaseURL, "OUTBOX_RELAY_KAFKA_BROKERS=" + strings.Join(kafkaBrokers, ",")})
	args := func(extra ...string) []string {
		return append([]string{"--topic", env.Topic, "--consumer", consumer, "--schema", schema, "--session-timeout", "6s", "--log-level", "info"}, extra...)
	}

	ledger := NewLedger()
	w := env.NewWriter(ledger)
	w.EventType, w.SchemaVersion = "order.confirmed", 1
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	seq := 0
	write := func(n int) {
		for n > 0 {
			k := min(n, 10)
			ids := make([]string, k)
			for i := range ids {
				seq++
				ids[i] = fmt.Sprintf("ord-%05d", seq)
			}
			if _, err := w.Write(ctx, ids, true); err != nil {
				t.Fatalf("write: %v", err)
			}
			n -= k
		}
	}
	const first = 300
	write(first)

	// 1. No offset is committed before the kill: the commit interval is 1h
	// and the batch limit (1000) is not reached.
	p1 := StartProc(t, "shipping-1", bin, procEnv, args("--commit-interval", "1h")...)
	processed := func() int {
		qctx, qcancel := context.WithTimeout(ctx, 10*time.Second)
		defer qcancel()
		var n int
		// Fails until shipping-1 has run inbox.Migrate.
		if err := env.DB.QueryRow(qctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "processed_events"}.Sanitize()+` WHERE consumer = $1`, consumer).Scan(&n); err != nil {
			return 0
		}
		return n
	}
	if !within(60*time.Second, 100*time.Millisecond, func() bool { return processed() >= first }) {
		t.Fatalf("shipping-1 processed %d of %d events within 60s", processed(), first)
	}
	offs := committedOffsets(t, consumer, env.Topic, env.Partitions)
	for p, o := range offs {
		if o >= 0 {
			t.Fatalf("partition %d has committed offset %d before the kill; the test needs none (%v)", p, o, offs)
		}
	}
	p1.Kill9()

	p2 := StartProc(t, "shipping-2", bin, procEnv, args("--commit-interval", "200ms", "--until-idle", "3s")...)
	if err := p2.Wait(60 * time.Second); err != nil {
		t.Fatalf("shipping-2: %v\n%s", err, tail(p2.Output(), 30))
	}
	tot := parseShipping(t, p2.Output())
	t.Logf("after kill -9 between the PostgreSQL commits and the offset commit: %+v", tot)
	if tot.applied != 0 || tot.duplicates != first || tot.shipments != first || tot.counter != first {
		t.Fatalf("redelivery not absorbed: %+v, want applied 0, duplicates %d, shipments = counter = %d", tot, first, first)
	}
	var sum int64
	for _, o := range committedOffsets(t, consumer, env.Topic, env.Partitions) {
		sum += max(o, 0)
	}
	if sum != first {
		t.Fatalf("committed offsets add up to %d, want %d", sum, first)
	}

	// 2. kill -9 mid-stream with offsets committed every 50ms.
	p3 := StartProc(t, "shipping-3", bin, procEnv, args("--commit-interval", "50ms")...)
	var wg sync.WaitGroup
	var stop atomic.Bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 40 && !stop.Load(); i++ {
			write(10)
			// wall-clock: paces the writes (10 events every 50 ms)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	if !within(60*time.Second, 20*time.Millisecond, func() bool { return processed() >= first+150 }) {
		t.Fatalf("shipping-3 did not get to %d processed events", first+150)
	}
	p3.Kill9()
	wg.Wait()
	total := ledger.CommittedCount()
	p4 := StartProc(t, "shipping-4", bin, procEnv, args("--commit-interval", "200ms", "--until-idle", "3s")...)
	if err := p4.Wait(60 * time.Second); err != nil {
		t.Fatalf("shipping-4: %v\n%s", err, tail(p4.Output(), 30))
	}
	tot = parseShipping(t, p4.Output())
	msg := fmt.Sprintf("TestInboxKill9BetweenCommits: %d events; after the mid-stream kill -9 the restarted consumer applied %d and absorbed %d duplicates; shipments %d, counter %d",
		total, tot.applied, tot.duplicates, tot.shipments, tot.counter)
	t.Log(msg)
	fmt.Println(msg)
	if tot.shipments != total || tot.counter != total || processed() != total {
		t.Fatalf("want %d shipments, counter and processed events; got %+v, processed %d", total, tot, processed())
	}
}

// relayRecord builds a record the way the relay does (see publisher).
func relayRecord(id, aggType, aggID string, version int64, eventType string, payload string) kafka.Message {
	return kafka.Message{
		Key:   []byte(aggID),
		Value: []byte(payload),
		Headers: []kafka.Header{
			{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte(eventType)},
			{Key: "schema_version", Value: []byte("1")}, {Key: "aggregate_type", Value: []byte(aggType)},
			{Key: "aggregate_version", Value: []byte(strconv.FormatInt(version, 10))},
		},
		Time: time.Now(),
	}
}

func produce(t testing.TB, topic string, msgs ...kafka.Message) {
	t.Helper()
	w := &kafka.Writer{Addr: kafka.TCP(kafkaBrokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond}
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// versionedState is a handler that applies aggregate versions strictly in
// sequence (version-guarded UPDATE checked with ExpectRows) into table.
func versionedState(table string, fail func(ev *record.Event) error) inbox.Handler {
	return func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		if err := fail(ev); err != nil {
			return err
		}
		if ev.AggregateVersion == 1 {
			tag, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, version) VALUES ($1, 1) ON CONFLICT DO NOTHING`, ev.AggregateID)
			if err != nil {
				return err
			}
			return inbox.ExpectRows(tag, 1)
		}
		tag, err := tx.Exec(ctx, `UPDATE `+table+` SET version = $2 WHERE id = $1 AND version = $2 - 1`, ev.AggregateID, ev.AggregateVersion)
		if err != nil {
			return err
		}
		return inbox.ExpectRows(tag, 1)
	}
}

func newUUID(t testing.TB) string {
	w := &Writer{}
	return w.NextEvents([]string{"x"})[0].ID
}

// TestInboxDeadLetterWaitRetry: a permanently failing event is
// dead-lettered, its aggregate's later events are parked in order while
// other aggregates go on, transient failures are retried, redeliveries of
// applied and parked events are absorbed, and Retry applies the parked
// events in order once the handler is fixed.
func TestInboxDeadLetterWaitRetry(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 3})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, pool, schema); err != nil { // idempotent
		t.Fatal(err)
	}
	state := pgx.Identifier{schema, "state"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+state+` (id text PRIMARY KEY, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	var broken atomic.Bool
	broken.Store(true)
	var flaky atomic.Int32 // a0 v1 fails twice, transiently
	handler := versionedState(state, func(ev *record.Event) error {
		if ev.AggregateID == "bad" && ev.AggregateVersion == 2 && broken.Load() {
			return poison.Permanent(errors.New("cannot ship to the moon"))
		}
		if ev.AggregateID == "a0" && ev.AggregateVersion == 1 && flaky.Add(1) <= 2 {
			return errors.New("downstream hiccup")
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	metrics := inboxprom.New(reg)
	consumer := "dl_" + env.Sfx
	c, err := inbox.New(inbox.Config{
		Name: consumer, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema, Handler: handler,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, CommitInterval: 100 * time.Millisecond,
	}, inbox.WithMetrics(metrics))
	if err != nil {
		t.Fatal(err)
	}

	var msgs []kafka.Message
	ids := map[string]map[int64]string{}
	for v := int64(1); v <= 5; v++ {
		for _, agg := range []string{"a0", "a1", "a2", "a3", "a4", "a5", "bad"} {
			id := newUUID(t)
			if ids[agg] == nil {
				ids[agg] = map[int64]string{}
			}
			ids[agg][v] = id
			msgs = append(msgs, relayRecord(id, "order", agg, v, "order.updated", `{}`))
		}
	}
	// Redeliveries of an event that will be applied and of one that will be parked.
	msgs = append(msgs, msgs[0], relayRecord(ids["bad"][4], "order", "bad", 4, "order.updated", `{}`))
	produce(t, env.Topic, msgs...)

	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(runCtx) }()
	defer func() { stopRun(); <-runErr }()

	wantApplied := int64(6*5 + 1)
	if !within(45*time.Second, 50*time.Millisecond, func() bool {
		st := c.Stats()
		return st.Applied+st.Duplicates+st.Parked+st.DeadLettered >= int64(len(msgs))
	}) {
		t.Fatalf("not all %d records handled: %+v", len(msgs), c.Stats())
	}
	st := c.Stats()
	t.Logf("stats after the first pass: %+v", st)
	if st.Applied != wantApplied || st.DeadLettered != 1 || st.Parked != 3 || st.Duplicates != 2 || st.Retries < 2 {
		t.Fatalf("stats %+v: want applied %d, dead 1, parked 3, duplicates 2, retries >= 2", st, wantApplied)
	}
	if got := counterValue(t, reg, "outbox_relay_inbox_duplicates_absorbed_total", consumer); got != 2 {
		t.Fatalf("duplicates metric = %v", got)
	}
	version := func(agg string) int {
		return countRows(t, env.DB, `SELECT coalesce((SELECT version FROM `+state+` WHERE id = $1), 0)`, agg)
	}
	for _, agg := range []string{"a0", "a1", "a2", "a3", "a4", "a5"} {
		if v := version(agg); v != 5 {
			t.Fatalf("aggregate %s at version %d, want 5 (other aggregates must go on)", agg, v)
		}
	}
	if v := version("bad"); v != 1 {
		t.Fatalf("bad at version %d, want 1", v)
	}
	// The failed event is not marked processed.
	if n := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, "processed_events"}.Sanitize()+` WHERE consumer = $1 AND aggregate_id = 'bad'`, consumer); n != 1 {
		t.Fatalf("bad has %d processed_events rows, want 1 (only version 1)", n)
	}
	dls, err := c.DeadLetters(ctx, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dls {
		got = append(got, fmt.Sprintf("%s:%d", d.Status, d.AggregateVersion))
	}
	if strings.Join(got, ",") != "dead:2,parked:3,parked:4,parked:5" || !strings.Contains(dls[0].Reason, "moon") || dls[0].Attempts != 1 {
		t.Fatalf("dead letters %v (reason %q, attempts %d)", got, dls[0].Reason, dls[0].Attempts)
	}

	// Still broken: Retry stops at the first event, which stays dead.
	if n, err := c.Retry(ctx, "order", "bad"); !errors.Is(err, inbox.ErrStillFailing) || n != 0 {
		t.Fatalf("retry while broken: %d, %v", n, err)
	}
	broken.Store(false)
	n, err := c.Retry(ctx, "order", "bad")
	if err != nil || n != 4 || version("bad") != 5 {
		t.Fatalf("retry: applied %d, err %v, version %d; want 4, nil, 5", n, err, version("bad"))
	}
	// The aggregate flows again; a redelivery of a retried event is absorbed.
	produce(t, env.Topic, relayRecord(newUUID(t), "order", "bad", 6, "order.updated", `{}`),
		relayRecord(ids["bad"][3], "order", "bad", 3, "order.updated", `{}`))
	if !within(20*time.Second, 50*time.Millisecond, func() bool { return version("bad") == 6 && c.Stats().Duplicates == 3 }) {
		t.Fatalf("bad v6 not applied after the retry (version %d, stats %+v)", version("bad"), c.Stats())
	}
	if dls, _ := c.DeadLetters(ctx, false, 0); len(dls) != 0 {
		t.Fatalf("open dead letters after retry: %d", len(dls))
	}
	// Offsets: committed past everything handled (dead-lettered and parked
	// events are final outcomes).
	if !within(10*time.Second, 100*time.Millisecond, func() bool {
		var sum int64
		for _, o := range committedOffsets(t, consumer, env.Topic, env.Partitions) {
			sum += max(o, 0)
		}
		return sum == int64(len(msgs)+2)
	}) {
		t.Fatalf("committed offsets %v, want them to add up to %d", committedOffsets(t, consumer, env.Topic, env.Partitions), len(msgs)+2)
	}
}

// counterValue reads a counter of reg by name and consumer label.
func counterValue(t testing.TB, reg *prometheus.Registry, name, consumer string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" && l.GetValue() == consumer {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("metric %s{consumer=%q} not found", name, consumer)
	return 0
}

// TestInboxHalt: under poison.Halt a permanent failure stops Run with a
// HaltError, and the group's offset is not committed past the event.
func TestInboxHalt(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 1})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	var msgs []kafka.Message
	for i := int64(1); i <= 5; i++ {
		msgs = append(msgs, relayRecord(newUUID(t), "order", "o-1", i, "order.updated", `{}`))
	}
	produce(t, env.Topic, msgs...)
	consumer := "halt_" + env.Sfx
	c, err := inbox.New(inbox.Config{
		Name: consumer, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: pool, Schema: schema, Policy: poison.Halt,
		MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, CommitInterval: 10 * time.Millisecond,
		Handler: func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
			if ev.AggregateVersion == 3 {
				return errors.New("always fails")
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Run(ctx)
	var he *poison.HaltError
	if !errors.As(err, &he) || he.AggregateID != "o-1" {
		t.Fatalf("Run = %v, want a HaltError", err)
	}
	if st := c.Stats(); st.Applied != 2 || st.DeadLettered != 0 {
		t.Fatalf("stats %+v, want 2 applied", st)
	}
	if offs := committedOffsets(t, consumer, env.Topic, 1); offs[0] != 2 {
		t.Fatalf("committed offset %d, want 2 (not past the failed event at offset 2)", offs[0])
	}
}
