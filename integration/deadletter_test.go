//go:build integration

package integration

// Poison events, quarantine and the dlq commands (docs/design.md, "Issue 3
// additions") against the real PostgreSQL and Kafka, through the built binary.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// ---------------------------------------------------------------------------
// Dead-letter table helpers.

// dlTable is the relay's dead-letter table for outbox tables in schema public.
const dlTable = "public.outbox_dead_letter"

// dlRow is one row of the dead-letter table.
type dlRow struct {
	EventID     string
	AggType     string
	AggID       string
	Version     *int64
	Status      string
	Reason      string
	Class       string
	Attempts    int
	Headers     *string
	Topic       string
	TxLSN       string
	Ordinal     int
	FirstFailed time.Time
	Resolution  *string
}

func (r dlRow) version() int64 {
	if r.Version == nil {
		return -1
	}
	return *r.Version
}

func (r dlRow) String() string {
	res := ""
	if r.Resolution != nil {
		res = " resolution=" + *r.Resolution
	}
	return fmt.Sprintf("{%s %s/%s v%d %s attempts=%d lsn=%s/%d reason=%q%s}", r.EventID, r.AggType, r.AggID, r.version(),
		r.Status, r.Attempts, r.TxLSN, r.Ordinal, r.Reason, res)
}

// dlRows returns the env's dead-letter rows (of aggregate aggID, or all
// when empty) in commit order.
func dlRows(t testing.TB, env *Env, aggID string) []dlRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []dlRow
	err := env.DB.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `select event_id, aggregate_type, aggregate_id, aggregate_version, status, reason, class,
				attempts, headers, coalesce(topic, ''), tx_lsn::text AS tx_lsn_text, tx_ordinal, first_failed_at, resolution
			from `+dlTable+` where outbox_table = $1 and ($2 = '' or aggregate_id = $2)
			order by tx_lsn, tx_ordinal, event_id`, env.Table, aggID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r dlRow
			if err := rows.Scan(&r.EventID, &r.AggType, &r.AggID, &r.Version, &r.Status, &r.Reason, &r.Class,
				&r.Attempts, &r.Headers, &r.Topic, &r.TxLSN, &r.Ordinal, &r.FirstFailed, &r.Resolution); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatalf("read %s: %v", dlTable, err)
	}
	return out
}

// dlCleanup removes the env's dead-letter rows when the test ends (the table
// is shared by every outbox table of the schema), logging them on failure.
// Call it right after NewEnv, so it runs after the relays are stopped.
func dlCleanup(t *testing.T, env *Env) {
	t.Cleanup(func() {
		if t.Failed() {
			rows := dlRows(t, env, "")
			t.Logf("dead-letter rows of %s at the end (%d):", env.Table, len(rows))
			for i, r := range rows {
				if i >= 80 {
					t.Logf("  ... %d more", len(rows)-i)
					break
				}
				t.Logf("  %s", r)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := env.DB.Exec(ctx, `delete from `+dlTable+` where outbox_table = $1`, env.Table); err != nil {
			t.Logf("cleanup: delete dead-letter rows: %v", err)
		}
	})
}

// waitDL polls the dead-letter rows of aggID until cond holds.
func waitDL(t *testing.T, env *Env, aggID string, timeout time.Duration, what string, cond func([]dlRow) bool) []dlRow {
	t.Helper()
	var rows []dlRow
	if !within(timeout, 100*time.Millisecond, func() bool {
		rows = dlRows(t, env, aggID)
		return cond(rows)
	}) {
		t.Fatalf("dead-letter rows of aggregate %q: %s not reached within %s; rows (%d): %v", aggID, what, timeout, len(rows), rows)
	}
	return rows
}

// countStatus counts rows per status.
func countStatus(rows []dlRow) map[string]int {
	m := map[string]int{}
	for _, r := range rows {
		m[r.Status]++
	}
	return m
}

// checkQuarantine verifies rows are exactly: poison 'dead' (reason
// containing one of reasonAny), then parked, one per event, in the order
// and with the versions of parked.
func checkQuarantine(t *testing.T, rows []dlRow, poison Event, parked []Event, reasonAny ...string) {
	t.Helper()
	if len(rows) != 1+len(parked) {
		t.Fatalf("dead-letter rows: got %d, want 1 dead + %d parked: %v", len(rows), len(parked), rows)
	}
	d := rows[0]
	if d.EventID != poison.ID || d.Status != "dead" {
		t.Fatalf("first dead-letter row %s, want the poison event %s with status dead", d, poison.ID)
	}
	if d.Class != "permanent" {
		t.Errorf("dead row class %q, want permanent", d.Class)
	}
	if !containsAnyFold(d.Reason, reasonAny...) {
		t.Errorf("dead row reason %q does not mention any of %q", d.Reason, reasonAny)
	}
	if d.version() != poison.Version {
		t.Errorf("dead row aggregate_version %d, want %d", d.version(), poison.Version)
	}
	for i, ev := range parked {
		r := rows[1+i]
		if r.EventID != ev.ID || r.Status != "parked" || r.version() != ev.Version {
			t.Fatalf("dead-letter row %d = %s, want event %s v%d parked (rows in commit order: %v)", 1+i, r, ev.ID, ev.Version, rows)
		}
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].version() <= rows[i-1].version() {
			t.Fatalf("dead-letter rows not in aggregate_version order at %d: %s after %s", i, rows[i], rows[i-1])
		}
	}
}

func containsAnyFold(s string, subs ...string) bool {
	ls := strings.ToLower(s)
	for _, sub := range subs {
		if strings.Contains(ls, strings.ToLower(sub)) {
			return true
		}
	}
	return false
}

// dlqListEntry is one line of `outbox-relay dlq list --json`.
type dlqListEntry struct {
	EventID          string `json:"event_id"`
	AggregateType    string `json:"aggregate_type"`
	AggregateID      string `json:"aggregate_id"`
	AggregateVersion *int64 `json:"aggregate_version"`
	Status           string `json:"status"`
	Reason           string `json:"reason"`
	Topic            string `json:"topic"`
	TxLSN            string `json:"tx_lsn"`
	Attempts         int    `json:"attempts"`
}

// ---------------------------------------------------------------------------
// Writing events with overrides.

// rowOverride replaces parts of one generated outbox row.
type rowOverride struct {
	headers *string // raw jsonb text of the headers column
	payload string  // raw jsonb text of the payload column
}

// insertRows inserts evs (overrides by index) in one statement of tx.
func insertRows(ctx context.Context, tx pgx.Tx, table string, evs []Event, over map[int]rowOverride) error {
	const cols = 8
	var sb strings.Builder
	sb.WriteString("insert into " + table +
		" (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers) values ")
	args := make([]any, 0, len(evs)*cols)
	for i, e := range evs {
		if i > 0 {
			sb.WriteString(", ")
		}
		b := i * cols
		fmt.Fprintf(&sb, "($%d::uuid, $%d, $%d, $%d, $%d, $%d, $%d::jsonb, $%d::jsonb)", b+1, b+2, b+3, b+4, b+5, b+6, b+7, b+8)
		payload, _ := json.Marshal(map[string]any{"aggregate_id": e.AggregateID, "version": e.Version, "note": "integration"})
		headers, _ := json.Marshal(map[string]string{"trace_id": e.TraceID})
		p, h := string(payload), string(headers)
		if o, ok := over[i]; ok {
			if o.payload != "" {
				p = o.payload
			}
			if o.headers != nil {
				h = *o.headers
			}
		}
		args = append(args, e.ID, e.AggregateType, e.AggregateID, e.Version, e.EventType, e.SchemaVersion, p, h)
	}
	_, err := tx.Exec(ctx, sb.String(), args...)
	return err
}

// commitRows inserts evs in one transaction, commits, stamps CommitTime and
// returns pg_current_wal_insert_lsn() right after the commit.
func commitRows(ctx context.Context, db *DB, table string, evs []Event, over map[int]rowOverride) (string, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if err := insertRows(ctx, tx, table, evs, over); err != nil {
		return "", err
	}
	if err := tx.Commit(ctx); err != nil {
		return "", err
	}
	now := time.Now()
	for i := range evs {
		evs[i].CommitTime = now
	}
	var lsn string
	if err := db.QueryRow(ctx, `select pg_current_wal_insert_lsn()::text`).Scan(&lsn); err != nil {
		return "", err
	}
	return lsn, nil
}

// aggWriter writes the events of one aggregate (the one a test poisons).
// Each transaction is [mix event, agg event, mix event], where the mix
// events belong to aggregates only this writer uses and are expected in
// Kafka: the poison's own transaction carries healthy events too.
type aggWriter struct {
	env    *Env
	w      *Writer
	agg    string
	mixes  []string
	others *Ledger

	mu  sync.Mutex
	evs []Event // agg's events in commit order
	n   int
}

func newAggWriter(env *Env, agg string, others *Ledger) *aggWriter {
	return &aggWriter{env: env, w: env.NewWriter(others), agg: agg, others: others,
		mixes: []string{agg + "-mix-a", agg + "-mix-b", agg + "-mix-c"}}
}

// write commits one transaction with the next event of the aggregate; a
// non-nil headers replaces that event's headers column.
func (a *aggWriter) write(ctx context.Context, headers *string, payload string) (Event, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	evs := a.w.NextEvents([]string{a.mixes[a.n%3], a.agg, a.mixes[(a.n+1)%3]})
	var over map[int]rowOverride
	if headers != nil || payload != "" {
		over = map[int]rowOverride{1: {headers: headers, payload: payload}}
	}
	lsn, err := commitRows(ctx, a.env.DB, a.w.Table, evs, over)
	if err != nil {
		return Event{}, "", err
	}
	a.others.addCommitted([]Event{evs[0], evs[2]}, "")
	a.evs = append(a.evs, evs[1])
	return evs[1], lsn, nil
}

func (a *aggWriter) mustWrite(ctx context.Context, t *testing.T, headers *string, payload string) (Event, string) {
	t.Helper()
	ev, lsn, err := a.write(ctx, headers, payload)
	if err != nil {
		t.Fatalf("write event of %s: %v", a.agg, err)
	}
	return ev, lsn
}

// writeN commits n healthy events of the aggregate, one per transaction.
func (a *aggWriter) writeN(ctx context.Context, t *testing.T, n int, every time.Duration) []Event {
	t.Helper()
	out := make([]Event, 0, n)
	for i := 0; i < n; i++ {
		ev, _ := a.mustWrite(ctx, t, nil, "")
		out = append(out, ev)
		// wall-clock: paces the writes (one per every)
		time.Sleep(every)
	}
	return out
}

// background writes healthy events every interval until the returned stop
// is called; stop returns the events written.
func (a *aggWriter) background(ctx context.Context, t *testing.T, every time.Duration) (stop func() []Event) {
	var halt atomic.Bool
	done := make(chan struct{})
	var out []Event
	var werr error
	go func() {
		defer close(done)
		for !halt.Load() {
			ev, _, err := a.write(ctx, nil, "")
			if err != nil {
				werr = err
				return
			}
			out = append(out, ev)
			// wall-clock: paces the background writes (one per every)
			time.Sleep(every)
		}
	}()
	var once sync.Once
	stop = func() []Event {
		once.Do(func() {
			halt.Store(true)
			<-done
		})
		if werr != nil {
			t.Fatalf("background writer of %s: %v", a.agg, werr)
		}
		return out
	}
	t.Cleanup(func() { halt.Store(true); <-done })
	return stop
}

// dlLoad is background write load over many aggregates.
type dlLoad struct {
	stop   atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	err    error
	txs    atomic.Int64
	cancel context.CancelFunc
}

// startDLLoad runs `writers` writers over aggregates agg-000..: writer w
// owns the aggregates i%writers == w, so versions increase in commit order.
func startDLLoad(t *testing.T, env *Env, ledger *Ledger, aggregates, writers, perTx int, pause time.Duration) *dlLoad {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	l := &dlLoad{cancel: cancel}
	for w := 0; w < writers; w++ {
		var own []string
		for i := w; i < aggregates; i += writers {
			own = append(own, aggName(i))
		}
		wr := env.NewWriter(ledger)
		rng := rand.New(rand.NewSource(int64(w) + 11))
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for !l.stop.Load() {
				ids := make([]string, perTx)
				for i := range ids {
					ids[i] = own[rng.Intn(len(own))]
				}
				if _, err := wr.Write(ctx, ids, true); err != nil {
					l.mu.Lock()
					if l.err == nil && !l.stop.Load() {
						l.err = err
					}
					l.mu.Unlock()
					return
				}
				l.txs.Add(1)
				// wall-clock: paces the load writer (a transaction per pause)
				time.Sleep(pause)
			}
		}()
	}
	t.Cleanup(func() { l.stop.Store(true); l.wg.Wait(); cancel() })
	return l
}

// Stop stops the writers and fails the test on a write error.
func (l *dlLoad) Stop(t *testing.T) {
	t.Helper()
	l.stop.Store(true)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		t.Fatalf("load writer: %v", l.err)
	}
}

// ---------------------------------------------------------------------------
// Kafka helpers.

// idsOf returns the event ids of evs as a set.
func idsOf(evs ...[]Event) map[string]Event {
	m := map[string]Event{}
	for _, list := range evs {
		for _, e := range list {
			m[e.ID] = e
		}
	}
	return m
}

func union(ms ...map[string]Event) map[string]Event {
	out := map[string]Event{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// seenIDs returns which of ids appear in records.
func seenIDs(records []Record, ids map[string]Event) []string {
	var out []string
	got := map[string]bool{}
	for _, r := range records {
		if _, ok := ids[r.EventID()]; ok && !got[r.EventID()] {
			got[r.EventID()] = true
			out = append(out, r.EventID())
		}
	}
	sort.Strings(out)
	return out
}

// withoutIDs drops the records of ids.
func withoutIDs(records []Record, ids map[string]Event) []Record {
	out := records[:0:0]
	for _, r := range records {
		if _, ok := ids[r.EventID()]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// aggFirsts returns the first occurrence of each event of aggregate key, in
// (partition, offset) order, and how many records of it were duplicates.
func aggFirsts(records []Record, key string) (firsts []Record, dups int, partitions map[int]bool) {
	recs := append([]Record(nil), records...)
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].Partition != recs[j].Partition {
			return recs[i].Partition < recs[j].Partition
		}
		return recs[i].Offset < recs[j].Offset
	})
	seen := map[string]bool{}
	partitions = map[int]bool{}
	for _, r := range recs {
		if r.Key != key {
			continue
		}
		partitions[r.Partition] = true
		if seen[r.EventID()] {
			dups++
			continue
		}
		seen[r.EventID()] = true
		firsts = append(firsts, r)
	}
	return firsts, dups, partitions
}

// checkAggStream verifies that the first occurrences of aggregate key's
// records are exactly want, in aggregate_version order, on one partition.
func checkAggStream(t *testing.T, records []Record, key string, want []Event) (dups int) {
	t.Helper()
	firsts, dups, parts := aggFirsts(records, key)
	if len(parts) > 1 {
		t.Errorf("aggregate %s on %d partitions: %v", key, len(parts), parts)
	}
	wantIDs := idsOf(want)
	var got []string
	prev := int64(-1)
	for _, r := range firsts {
		v, err := strconv.ParseInt(r.Headers["aggregate_version"], 10, 64)
		if err != nil {
			t.Errorf("aggregate %s record p%d@%d: aggregate_version header %q", key, r.Partition, r.Offset, r.Headers["aggregate_version"])
			continue
		}
		if _, ok := wantIDs[r.EventID()]; !ok {
			t.Errorf("aggregate %s: unexpected event %s v%d at p%d@%d", key, r.EventID(), v, r.Partition, r.Offset)
		}
		if v <= prev {
			t.Errorf("aggregate %s: first occurrence of v%d (p%d@%d) after v%d: out of order", key, v, r.Partition, r.Offset, prev)
		}
		prev = v
		got = append(got, r.EventID())
	}
	if len(got) != len(want) {
		var missing []string
		gotSet := map[string]bool{}
		for _, id := range got {
			gotSet[id] = true
		}
		for _, e := range want {
			if !gotSet[e.ID] {
				missing = append(missing, fmt.Sprintf("%s(v%d)", e.ID, e.Version))
			}
		}
		t.Errorf("aggregate %s: %d distinct events in Kafka, want %d; missing %v", key, len(got), len(want), firstN(missing, 10))
	}
	return dups
}

// checkWhileLoaded checks records against may (a ledger snapshot taken
// after them): nothing unexpected or forbidden, order and format right,
// and every event of must (an earlier snapshot) delivered.
func checkWhileLoaded(t *testing.T, records []Record, partitions int, must, may, forbidden map[string]Event) *Report {
	t.Helper()
	rep := CheckRecords(records, partitions, may, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: forbidden})
	lost := 0
	for _, id := range rep.Lost {
		if _, ok := must[id]; ok {
			lost++
		}
	}
	if lost > 0 || len(rep.Unexpected) > 0 || len(rep.Forbidden) > 0 || len(rep.Problems) > 0 || rep.Inversions > 0 || rep.NoEventID > 0 {
		t.Fatalf("delivery check (%d of the %d events that must be there lost): %s", lost, len(must), rep)
	}
	return rep
}

// topicExists asks a fresh client (no cached metadata) for the list of all
// topics; such a request never auto-creates a topic.
func topicExists(topic string) (bool, error) {
	tr := &kafka.Transport{MetadataTTL: time.Second}
	defer tr.CloseIdleConnections()
	cl := &kafka.Client{Addr: kafka.TCP(kafkaBrokers...), Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		return false, err
	}
	for _, tp := range md.Topics {
		if tp.Name == topic {
			return true, nil
		}
	}
	return false, nil
}

func requireNoTopic(t *testing.T, topic, when string) {
	t.Helper()
	ok, err := topicExists(topic)
	if err != nil {
		t.Fatalf("kafka metadata: %v", err)
	}
	if ok {
		t.Fatalf("RELAY BUG? topic %s exists %s, although nobody created it (CREATE_TOPICS=false; broker auto.create.topics.enable=true)", topic, when)
	}
}

// slotHolds reports whether the (inactive) slot would still stream the
// event with id: peeking decodes from confirmed_flush_lsn on, without
// consuming anything.
func slotHolds(t *testing.T, env *Env, id string) (holds bool, changes int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := env.DB.QueryRow(ctx, `select count(*) filter (where position(convert_to($3, 'UTF8') in data) > 0), count(*)
		from pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`,
		env.Slot, env.Publication, id).Scan(&changes, new(int))
	if err != nil {
		t.Fatalf("peek slot %s: %v", env.Slot, err)
	}
	return changes > 0, changes
}

// ---------------------------------------------------------------------------
// Tests.

// TestPoisonQuarantinesAggregate: a synchronous poison event (headers that
// are not an object of strings) in the middle of one aggregate's stream,
// under load; then dlq list and dlq retry while the relay runs.
func TestPoisonQuarantinesAggregate(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions|pgVersions)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	load := startDLLoad(t, env, others, 50, 3, 4, 4*time.Millisecond)
	const P = "agg-poisoned"
	pw := newAggWriter(env, P, others)
	before := pw.writeN(ctx, t, 15, 15*time.Millisecond)
	bad := `{"bad": 1}`
	poison, _ := pw.mustWrite(ctx, t, &bad, "")
	after := pw.writeN(ctx, t, 40, 15*time.Millisecond)
	t.Logf("aggregate %s: %d events before the poison v%d (%s), %d after; load %d txs so far",
		P, len(before), poison.Version, poison.ID, len(after), load.txs.Load())

	rows := waitDL(t, env, P, 30*time.Second, "1 dead + 40 parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows, poison, after, "headers")
	quarantinedAt := time.Since(t0)

	// The slot keeps advancing past the poison and the parked events.
	for round := 1; round <= 2; round++ {
		mark := env.CurrentInsertLSN()
		if !within(20*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) }) {
			t.Fatalf("round %d: confirmed_flush_lsn %s did not pass %s (after the poison and parked commits)", round, env.SlotInfo().ConfirmedFlush, mark)
		}
		t.Logf("round %d: confirmed_flush_lsn %s passed %s", round, env.SlotInfo().ConfirmedFlush, mark)
		if round == 1 {
			more := pw.writeN(ctx, t, 5, 10*time.Millisecond) // parked too
			after = append(after, more...)
		}
	}
	rows = waitDL(t, env, P, 20*time.Second, "every later event parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows, poison, after, "headers")

	// Every other aggregate is delivered, P up to the poison, nothing after.
	expected := union(others.Committed(), idsOf(before))
	forbidden := idsOf([]Event{poison}, after)
	if !c.WaitFor(expected, 60*time.Second, time.Second) {
		t.Fatalf("not every event of the other aggregates (and of %s before the poison) arrived", P)
	}
	if seen := seenIDs(c.Records(), forbidden); len(seen) > 0 {
		t.Fatalf("%d events of the quarantined aggregate are in Kafka (poison or later): %v", len(seen), seen)
	}
	// The load goes on: check against a later snapshot of the ledger, of
	// which only what was committed before the wait must be there. Events
	// whose COMMIT is in flight may be in Kafka before the writer records
	// them (a starved writer on a loaded machine), so they are allowed too.
	checkWhileLoaded(t, c.Records(), env.Partitions, expected, union(others.Committed(), others.Pending(), idsOf(before)), forbidden)
	if others := dlRows(t, env, ""); len(others) != len(rows) {
		t.Fatalf("dead-letter table holds rows of other aggregates: %d rows in all, %d of %s", len(others), len(rows), P)
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d) after the poison event", relay.exitCode)
	}

	// dlq list --aggregate P --json lists the poison then the parked events.
	res := env.RunCLI(30*time.Second, nil, "dlq", "list", "--aggregate", P, "--json")
	if res.Code != 0 {
		t.Fatalf("dlq list: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	var listed []dlqListEntry
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		var e dlqListEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("dlq list --json line %q: %v", line, err)
		}
		listed = append(listed, e)
	}
	if len(listed) != 1+len(after) {
		t.Fatalf("dlq list --aggregate %s: %d entries, want %d\n%s", P, len(listed), 1+len(after), res.Stdout)
	}
	for i, e := range listed {
		want, status := poison, "dead"
		if i > 0 {
			want, status = after[i-1], "parked"
		}
		if e.EventID != want.ID || e.Status != status || e.AggregateID != P || e.AggregateVersion == nil || *e.AggregateVersion != want.Version {
			t.Fatalf("dlq list entry %d = %+v, want %s v%d %s", i, e, want.ID, want.Version, status)
		}
	}

	// dlq show prints the whole entry.
	res = env.RunCLI(30*time.Second, nil, "dlq", "show", poison.ID)
	var shown struct {
		EventID string  `json:"event_id"`
		Status  string  `json:"status"`
		Headers *string `json:"headers"`
		Payload string  `json:"payload"`
	}
	if res.Code != 0 || json.Unmarshal([]byte(res.Stdout), &shown) != nil || shown.EventID != poison.ID || shown.Status != "dead" ||
		shown.Headers == nil || !strings.Contains(*shown.Headers, `"bad"`) || !strings.Contains(shown.Payload, P) {
		t.Fatalf("dlq show %s: exit %d, want the dead entry with its headers and payload:\n%s\n%s", poison.ID, res.Code, res.Stdout, tail(res.Stderr, 10))
	}

	// A retry before the fix fails on the poison (exit 1), publishes nothing
	// and leaves every row open.
	res = env.RunCLI(60*time.Second, nil, "dlq", "retry", "--aggregate", P)
	if res.Code != 1 || !strings.Contains(res.Stdout, "still failing") {
		t.Fatalf("dlq retry before the fix: exit %d, want 1 with \"still failing\"\nstdout:\n%s\nstderr:\n%s", res.Code, tail(res.Stdout, 5), tail(res.Stderr, 10))
	}
	rows = dlRows(t, env, P)
	checkQuarantine(t, rows, poison, after, "headers")
	if rows[0].Attempts != 2 {
		t.Errorf("poison row after a failed retry: attempts %d, want 2", rows[0].Attempts)
	}
	// wall-clock: a negative window: a failed retry publishes nothing (no event to wait for)
	time.Sleep(300 * time.Millisecond)
	if seen := seenIDs(c.Records(), forbidden); len(seen) > 0 {
		t.Fatalf("a failed retry published %d events: %v", len(seen), seen)
	}

	// Fix the poison row, then retry while the relay runs and P keeps
	// getting events (parked until the retry, published after it).
	env.Exec(`update `+dlTable+` set headers = '{"fixed":"yes"}' where outbox_table = $1 and aggregate_id = $2 and status = 'dead'`, env.Table, P)
	stopP := pw.background(ctx, t, 20*time.Millisecond)
	// wall-clock: P's load flows before the retry, so events are parked when it runs
	time.Sleep(700 * time.Millisecond)
	retryStart := time.Now()
	res = env.RunCLI(60*time.Second, nil, "dlq", "retry", "--aggregate", P)
	retryEnd := time.Now()
	t.Logf("dlq retry: exit %d in %s\n%s", res.Code, retryEnd.Sub(retryStart).Round(time.Millisecond), tail(res.Stdout, 5))
	if res.Code != 0 {
		t.Fatalf("dlq retry --aggregate %s: exit %d\nstdout:\n%s\nstderr:\n%s", P, res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	if !strings.Contains(res.Stdout, "quarantine lifted") {
		t.Errorf("dlq retry output does not say the quarantine was lifted:\n%s", res.Stdout)
	}
	// wall-clock: P's load flows on after the retry lifted the quarantine
	time.Sleep(1500 * time.Millisecond)
	during := stopP()
	final := pw.writeN(ctx, t, 10, 10*time.Millisecond)
	load.Stop(t)

	allP := append(append(append(append(append([]Event(nil), before...), poison), after...), during...), final...)
	expected = union(others.Committed(), idsOf(allP))
	if !c.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("not every event arrived after the retry")
	}
	records := c.Records()
	dups := checkAggStream(t, records, P, allP)
	// The retried poison carries the fixed headers.
	for _, r := range records {
		if r.EventID() == poison.ID && (r.Headers["fixed"] != "yes" || r.Headers["bad"] != "") {
			t.Errorf("retried poison record headers %v, want the fixed ones", r.Headers)
		}
	}
	// Everything else (the retried parked events included) is faithful:
	// key, partition, headers, payload, commit timestamp.
	pid := idsOf([]Event{poison})
	delete(expected, poison.ID)
	rep := CheckRecords(withoutIDs(records, pid), env.Partitions, expected, CheckOptions{TimestampSkew: 5 * time.Second})
	RequireOK(t, rep)

	rows = dlRows(t, env, P)
	st := countStatus(rows)
	if st["published"] != len(rows) || len(rows) < 1+len(after) {
		t.Fatalf("after the retry: rows %v, want all published (at least %d)", st, 1+len(after))
	}
	inDL := map[string]bool{}
	for _, r := range rows {
		inDL[r.EventID] = true
		if r.Resolution == nil || *r.Resolution != "retried" {
			t.Errorf("row %s: resolution %v, want retried", r, r.Resolution)
		}
	}
	parkedDuring, lateInDL := 0, 0
	for _, e := range append(append([]Event(nil), during...), final...) {
		if inDL[e.ID] {
			parkedDuring++
			if e.CommitTime.After(retryEnd.Add(100 * time.Millisecond)) {
				lateInDL++
				t.Errorf("event %s v%d committed %s after the retry ended is in the dead-letter table", e.ID, e.Version, e.CommitTime.Sub(retryEnd))
			}
		}
	}
	// Latency of the other aggregates while the retry held the aggregate lock.
	var maxLat time.Duration
	byID := others.Committed()
	for _, r := range records {
		if ev, ok := byID[r.EventID()]; ok && !ev.CommitTime.Before(retryStart) && !ev.CommitTime.After(retryEnd) {
			if l := r.Seen.Sub(ev.CommitTime); l > maxLat {
				maxLat = l
			}
		}
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	mark := env.CurrentInsertLSN()
	if !within(20*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) }) {
		t.Errorf("confirmed_flush_lsn %s did not pass %s after the retry", env.SlotInfo().ConfirmedFlush, mark)
	}
	msg := fmt.Sprintf("TestPoisonQuarantinesAggregate: others=%d delivered=%d dups=%d; %s: before=%d poison=v%d parked=%d new_during_retry=%d (parked then retried %d) final=%d, P dups=%d; quarantined after %s, retry %s, others' max latency during retry %s, total %s",
		len(others.Committed()), rep.Delivered, rep.Duplicates, P, len(before), poison.Version, len(after), len(during), parkedDuring, len(final), dups,
		quarantinedAt.Round(time.Millisecond), retryEnd.Sub(retryStart).Round(time.Millisecond), maxLat.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want 0", exited, code)
	}
}

// TestPoisonTooLargeForTopic: the broker rejects one record (the topic's
// max.message.bytes is small): an asynchronous poison found in a lane.
func TestPoisonTooLargeForTopic(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{NoTopic: true})
	dlCleanup(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const maxBytes = "2000"
	resp, err := kafkaClient().CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: env.Topic, NumPartitions: env.Partitions, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "max.message.bytes", ConfigValue: maxBytes}},
	}}})
	if err != nil || resp.Errors[env.Topic] != nil {
		t.Fatalf("create topic %s: %v %v", env.Topic, err, resp)
	}
	env.CreateTopic(ctx, env.Topic, env.Partitions) // waits for leaders (already exists)
	dc, err := kafkaClient().DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: env.Topic, ConfigNames: []string{"max.message.bytes"}}}})
	if err != nil || len(dc.Resources) != 1 || len(dc.Resources[0].ConfigEntries) != 1 || dc.Resources[0].ConfigEntries[0].ConfigValue != maxBytes {
		t.Fatalf("topic %s max.message.bytes not %s: %v %+v", env.Topic, maxBytes, err, dc)
	}

	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	load := startDLLoad(t, env, others, 20, 2, 3, 10*time.Millisecond)

	const Q = "agg-huge"
	qw := newAggWriter(env, Q, others)
	before := qw.writeN(ctx, t, 10, 20*time.Millisecond)
	// The big event shares its transaction, hence most likely its partition
	// batch, with two later events of Q and with events of other aggregates
	// of Q's partition (before and after it): the lane must split the
	// rejected batch, deliver the others and park Q's later events.
	qPart := KafkaPartition([]byte(Q), env.Partitions)
	var same []string
	for i := 0; len(same) < 4; i++ {
		if id := fmt.Sprintf("same-%03d", i); KafkaPartition([]byte(id), env.Partitions) == qPart {
			same = append(same, id)
		}
	}
	txEvs := qw.w.NextEvents([]string{same[0], same[1], Q, Q, same[2], Q, same[3]})
	big, _ := json.Marshal(map[string]any{"aggregate_id": Q, "version": txEvs[2].Version, "pad": strings.Repeat("x", 10<<10)})
	if _, err := commitRows(ctx, env.DB, env.QuotedTable(), txEvs, map[int]rowOverride{2: {payload: string(big)}}); err != nil {
		t.Fatal(err)
	}
	others.addCommitted([]Event{txEvs[0], txEvs[1], txEvs[4], txEvs[6]}, "")
	poison := txEvs[2]
	after := []Event{txEvs[3], txEvs[5]}
	after = append(after, qw.writeN(ctx, t, 15, 20*time.Millisecond)...)

	rows := waitDL(t, env, Q, 30*time.Second, "1 dead + 17 parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows, poison, after, "message size too large", "message_too_large", "MESSAGE_TOO_LARGE")
	if strings.Contains(rows[0].Reason, "Publish.MaxBatchBytes") {
		t.Errorf("dead row reason %q: the relay rejected it itself; this test wants the broker's rejection", rows[0].Reason)
	}
	t.Logf("dead row: %s", rows[0])
	quarantinedAt := time.Since(t0)
	// wall-clock: load flows on past the quarantine before it stops
	time.Sleep(time.Second)
	load.Stop(t)

	expected := union(others.Committed(), idsOf(before))
	forbidden := idsOf([]Event{poison}, after)
	ok := c.WaitFor(expected, 60*time.Second, time.Second)
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: forbidden})
	if !ok {
		t.Errorf("not every healthy event arrived")
	}
	if len(rep.Lost) > 0 || len(rep.Unexpected) > 0 || len(rep.Forbidden) > 0 || len(rep.Problems) > 0 || rep.Inversions > 0 {
		t.Fatalf("delivery check: %s", rep)
	}
	checkAggStream(t, c.Records(), Q, before)
	if all := dlRows(t, env, ""); len(all) != len(rows) {
		t.Fatalf("dead-letter rows of other aggregates (a healthy record was poisoned?): %v", all)
	}
	mark := env.CurrentInsertLSN()
	if !within(20*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) }) {
		t.Fatalf("confirmed_flush_lsn %s did not pass %s", env.SlotInfo().ConfirmedFlush, mark)
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	rejected, maxBatch := 0, 0
	for _, l := range relay.LogLines("publish rejected permanently", 100000) {
		var f struct {
			Batch int `json:"batch"`
		}
		if json.Unmarshal([]byte(l), &f) == nil {
			rejected++
			maxBatch = max(maxBatch, f.Batch)
		}
	}
	msg := fmt.Sprintf("TestPoisonTooLargeForTopic: others=%d delivered=%d dups=%d; %s: before=%d poison=v%d (%d bytes) parked=%d; rejected produce requests logged=%d (largest batch %d records); quarantined after %s, total %s",
		len(others.Committed()), rep.Delivered, rep.Duplicates, Q, len(before), poison.Version, len(big), len(after), rejected, maxBatch,
		quarantinedAt.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestPoisonHaltPolicy: with --poison-policy halt a poison event stops the
// relay, with the slot held before it and nothing dead-lettered.
func TestPoisonHaltPolicy(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	halt := "OUTBOX_RELAY_POISON_POLICY=halt"
	relay := env.StartRelay(halt)
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	waitCaughtUp(t, env, c, w, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A burst of healthy transactions, then the poison right behind them:
	// an empty aggregate_id, in a transaction of its own.
	for i := 0; i < 20; i++ {
		if _, err := w.Write(ctx, []string{aggName(i % 10), aggName(10 + i%10), aggName(20 + i%10)}, true); err != nil {
			t.Fatal(err)
		}
	}
	// ... and one larger transaction, still in flight when the poison is decoded.
	big := make([]string, 1500)
	for i := range big {
		big[i] = aggName(i % 30)
	}
	if _, err := w.Write(ctx, big, true); err != nil {
		t.Fatal(err)
	}
	pre := ledger.Committed()
	poison := w.NextEvents([]string{""})
	if _, err := commitRows(ctx, env.DB, env.QuotedTable(), poison, nil); err != nil {
		t.Fatal(err)
	}
	afterPoison := env.CurrentInsertLSN()
	post := NewLedger()
	pw := env.NewWriter(post)
	for i := 0; i < 5; i++ {
		if _, err := pw.Write(ctx, []string{aggName(40 + i)}, true); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("committed %d events, then the poison %s (aggregate_id '') ending before %s, then %d more", len(pre), poison[0].ID, afterPoison, post.CommittedCount())

	code, exited := relay.Wait(30 * time.Second)
	if !exited {
		t.Fatalf("relay still running 30s after a poison event under policy halt")
	}
	stopped := time.Since(t0)
	log := relay.Log()
	if code != 1 || !strings.Contains(log, "policy is halt") || !strings.Contains(log, poison[0].ID) {
		t.Fatalf("relay exit %d, want 1 with a message naming the event and \"policy is halt\"; log tail:\n%s", code, relay.LogTail(15))
	}
	for _, l := range relay.LogLines("policy is halt", 3) {
		t.Logf("halt message: %s", l)
	}
	preOK := c.WaitFor(pre, 8*time.Second, time.Second)
	records := c.Records()
	if seen := seenIDs(records, union(idsOf(poison), post.Committed())); len(seen) > 0 {
		t.Fatalf("events at or after the poison are in Kafka: %v", seen)
	}
	missing1 := c.Missing(pre)
	if !preOK {
		// Not a loss (the slot is held before them), but under halt they
		// are withheld until the poison is dealt with.
		t.Errorf("RELAY BUG: %d of the %d events committed before the poison were not delivered before the halt: the relay stops "+
			"without draining the earlier in-flight events", missing1, len(pre))
	}
	if rows := dlRows(t, env, ""); len(rows) != 0 {
		t.Fatalf("policy halt wrote dead-letter rows: %v", rows)
	}
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active after the relay exited")
	}
	cf := env.SlotInfo().ConfirmedFlush
	if env.ConfirmedAtLeast(afterPoison) {
		t.Fatalf("confirmed_flush_lsn %s passed the poison's commit (%s) although the relay halted on it", cf, afterPoison)
	}
	holds, n := slotHolds(t, env, poison[0].ID)
	if !holds {
		t.Fatalf("the slot (confirmed_flush_lsn %s) no longer streams the poison event %s: it was skipped", cf, poison[0].ID)
	}
	t.Logf("confirmed_flush_lsn %s < %s; peek shows the poison still to come (%d change(s))", cf, afterPoison, n)

	// The position is held: the relay halts on the same event again ...
	r2 := env.StartRelay(halt)
	code2, exited2 := r2.Wait(30 * time.Second)
	if !exited2 || code2 != 1 || !r2.LogContains(poison[0].ID) || !r2.LogContains("policy is halt") {
		t.Fatalf("second relay under halt: exited=%v code=%d, want exit 1 on event %s; tail:\n%s", exited2, code2, poison[0].ID, r2.LogTail(10))
	}
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active after the second relay exited")
	}
	c.WaitFor(pre, 3*time.Second, 0)
	missing2 := c.Missing(pre)
	t.Logf("events committed before the poison still missing: %d after the first halt, %d after the second", missing1, missing2)
	// ... and switching to quarantine dead-letters it and delivers the rest.
	r3 := env.StartRelay()
	rows := waitDL(t, env, "", 30*time.Second, "the poison dead", func(r []dlRow) bool { return len(r) >= 1 })
	if len(rows) != 1 || rows[0].EventID != poison[0].ID || rows[0].Status != "dead" || !containsAnyFold(rows[0].Reason, "aggregate_id") {
		t.Fatalf("after switching to quarantine: rows %v, want the poison dead with an aggregate_id reason", rows)
	}
	all := union(pre, post.Committed())
	if !c.WaitFor(all, 30*time.Second, time.Second) {
		t.Fatalf("events after the poison not delivered once the policy is quarantine")
	}
	rep := c.Check(all, CheckOptions{TimestampSkew: 0})
	RequireOK(t, rep)
	if !r3.Running() {
		t.Fatalf("quarantine relay exited")
	}
	msg := fmt.Sprintf("TestPoisonHaltPolicy: pre=%d missing after halt #1=%d, after halt #2=%d, post=%d; halted (exit %d) %s after start; confirmed %s < %s; restart halted again; quarantine run delivered %d (dups %d); total %s",
		len(pre), missing1, missing2, post.CommittedCount(), code, stopped.Round(time.Millisecond), cf, afterPoison, rep.Delivered, rep.Duplicates, time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestDiscard: quarantine an aggregate, discard the poison with a reason;
// the parked events are published in order and new ones flow.
func TestDiscard(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := startDLLoad(t, env, others, 30, 2, 3, 5*time.Millisecond)

	const D = "agg-discarded"
	dw := newAggWriter(env, D, others)
	before := dw.writeN(ctx, t, 8, 15*time.Millisecond)
	bad := `{"trace_id": ["not", "a", "string"]}`
	poison, _ := dw.mustWrite(ctx, t, &bad, "")
	after := dw.writeN(ctx, t, 20, 15*time.Millisecond)
	rows := waitDL(t, env, D, 30*time.Second, "1 dead + 20 parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows, poison, after, "headers")

	res := env.RunCLI(60*time.Second, nil, "dlq", "discard", poison.ID, "--reason", "bad data")
	t.Logf("dlq discard: exit %d\n%s", res.Code, tail(res.Stdout, 4))
	if res.Code != 0 {
		t.Fatalf("dlq discard: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	discardEnd := time.Now()
	final := dw.writeN(ctx, t, 10, 15*time.Millisecond)
	load.Stop(t)

	wantD := append(append(append([]Event(nil), before...), after...), final...)
	expected := union(others.Committed(), idsOf(wantD))
	if !c.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("not every event arrived after the discard")
	}
	records := c.Records()
	if seen := seenIDs(records, idsOf([]Event{poison})); len(seen) > 0 {
		t.Fatalf("the discarded poison %s is in Kafka", poison.ID)
	}
	dups := checkAggStream(t, records, D, wantD)
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: idsOf([]Event{poison})})
	RequireOK(t, rep)

	rows = dlRows(t, env, D)
	if len(rows) != 1+len(after) {
		t.Fatalf("after the discard: %d rows, want %d (events after the discard must not be parked): %v", len(rows), 1+len(after), rows)
	}
	if r := rows[0]; r.EventID != poison.ID || r.Status != "discarded" || r.Resolution == nil || !strings.Contains(*r.Resolution, "bad data") {
		t.Fatalf("poison row after discard: %s, want status discarded with the reason in resolution", r)
	}
	for _, r := range rows[1:] {
		if r.Status != "published" {
			t.Fatalf("parked row after discard: %s, want published", r)
		}
	}
	res = env.RunCLI(30*time.Second, nil, "dlq", "list", "--aggregate", D)
	if res.Code != 0 || strings.Contains(res.Stdout, D) {
		t.Errorf("dlq list after the discard: exit %d, still lists %s:\n%s", res.Code, D, res.Stdout)
	}
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	msg := fmt.Sprintf("TestDiscard: others=%d delivered=%d dups=%d; %s: before=%d discarded=v%d republished=%d final=%d (dups %d); discard done %s after start, total %s",
		len(others.Committed()), rep.Delivered, rep.Duplicates, D, len(before), poison.Version, len(after), len(final), dups,
		discardEnd.Sub(t0).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestUnknownTopicBecomesPoison: without --create-topics, the events of a
// topic that does not exist become poison after --unknown-topic-timeout,
// while the other topic keeps flowing; the topic is never auto-created.
func TestUnknownTopicBecomesPoison(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	ghostTopic := "it." + env.Sfx + ".ghost"
	requireNoTopic(t, ghostTopic, "before the relay started")
	relay := env.StartRelay("OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=3s")
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := startDLLoad(t, env, others, 30, 2, 3, 10*time.Millisecond)

	ghosts := NewLedger()
	gw := env.NewWriter(ghosts)
	gw.AggregateType = "ghost"
	var ghostEvs [][]Event // per aggregate, in order
	ghostIDs := []string{"g-1", "g-2", "g-3"}
	ghostEvs = make([][]Event, len(ghostIDs))
	ghostAt := time.Now()
	for round := 0; round < 3; round++ {
		evs, err := gw.Write(ctx, ghostIDs, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := range evs {
			ghostEvs[i] = append(ghostEvs[i], evs[i])
		}
	}
	t.Logf("committed %d events of aggregate type ghost (topic %s does not exist)", ghosts.CommittedCount(), ghostTopic)

	var rows []dlRow
	if !within(30*time.Second, 50*time.Millisecond, func() bool {
		rows = dlRows(t, env, "")
		return len(rows) >= 1
	}) {
		t.Fatalf("no dead-letter row 30s after the unknown-topic events (timeout 3s); relay log:\n%s", relay.LogTail(10))
	}
	firstDead := rows[0].FirstFailed
	if firstDead.Sub(ghostAt) < 2900*time.Millisecond {
		t.Errorf("first unknown-topic poison %s after the commit, before the 3s timeout", firstDead.Sub(ghostAt))
	}
	rows = waitDL(t, env, "", 20*time.Second, "every ghost event dead or parked", func(r []dlRow) bool { return len(r) >= ghosts.CommittedCount() })
	deadAfter := firstDead.Sub(ghostAt)
	for i, id := range ghostIDs {
		var mine []dlRow
		for _, r := range rows {
			if r.AggID == id {
				mine = append(mine, r)
			}
		}
		checkQuarantine(t, mine, ghostEvs[i][0], ghostEvs[i][1:], "unknown_topic")
		if mine[0].Topic != ghostTopic {
			t.Errorf("dead row topic %q, want %q", mine[0].Topic, ghostTopic)
		}
	}
	t.Logf("dead row: %s", rows[0])

	// Meanwhile the normal topic kept flowing: what was committed in the
	// 1.5 s after the ghost events was in Kafka before the timeout expired.
	window := map[string]Event{}
	for id, e := range others.Committed() {
		if !e.CommitTime.Before(ghostAt) && e.CommitTime.Before(ghostAt.Add(1500*time.Millisecond)) {
			window[id] = e
		}
	}
	seenAt := map[string]time.Time{}
	for _, r := range c.Records() {
		if _, ok := seenAt[r.EventID()]; !ok {
			seenAt[r.EventID()] = r.Seen
		}
	}
	late, maxLat := 0, time.Duration(0)
	for id, e := range window {
		s, ok := seenAt[id]
		if !ok || s.After(firstDead) {
			late++
			continue
		}
		if l := s.Sub(e.CommitTime); l > maxLat {
			maxLat = l
		}
	}
	if len(window) == 0 || late > 0 {
		t.Errorf("normal topic stalled behind the unknown topic: %d of %d events committed in the 1.5s after the ghost events not delivered before the poison timeout fired", late, len(window))
	}

	// Later events: a known ghost aggregate is parked, a new one is dead at once.
	more, err := gw.Write(ctx, []string{"g-1", "g-4"}, true)
	if err != nil {
		t.Fatal(err)
	}
	rows = waitDL(t, env, "", 20*time.Second, "the later ghost events", func(r []dlRow) bool { return len(r) >= ghosts.CommittedCount() })
	for _, r := range rows {
		if r.EventID == more[0].ID && r.Status != "parked" || r.EventID == more[1].ID && r.Status != "dead" {
			t.Errorf("later ghost row %s: want g-1 parked, g-4 dead", r)
		}
	}
	if len(rows) != ghosts.CommittedCount() {
		t.Errorf("%d dead-letter rows, want %d", len(rows), ghosts.CommittedCount())
	}
	// A retry while the topic is still missing fails (exit 1), keeps the
	// event dead with attempts+1, and does not create the topic either.
	retryStart := time.Now()
	res := env.RunCLI(60*time.Second, nil, "dlq", "retry", "--aggregate", "g-2")
	retryTook := time.Since(retryStart)
	if res.Code != 1 || !strings.Contains(res.Stdout, "still failing") {
		t.Errorf("dlq retry of g-2 with its topic missing: exit %d, want 1 with \"still failing\"\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 10))
	}
	g2 := dlRows(t, env, "g-2")
	if len(g2) != 3 || g2[0].Status != "dead" || g2[0].Attempts != 2 || g2[1].Status != "parked" || g2[2].Status != "parked" {
		t.Errorf("g-2 rows after a failed retry: %v, want dead (attempts 2), parked, parked", g2)
	}
	requireNoTopic(t, ghostTopic, "after dlq retry wrote to it")

	// wall-clock: load flows on past the failed retry before it stops
	time.Sleep(500 * time.Millisecond)
	load.Stop(t)
	mark := env.CurrentInsertLSN()
	if !within(20*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) }) {
		t.Fatalf("confirmed_flush_lsn %s did not pass %s (the unknown-topic events are dead-lettered)", env.SlotInfo().ConfirmedFlush, mark)
	}
	expected := others.Committed()
	if !c.WaitFor(expected, 60*time.Second, time.Second) {
		t.Fatalf("normal events not all delivered")
	}
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second})
	RequireOK(t, rep)
	requireNoTopic(t, ghostTopic, "after the relay looked it up for "+time.Since(ghostAt).Round(time.Second).String())
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	retries := len(relay.LogLines("topic metadata unavailable, retrying", 100000))
	msg := fmt.Sprintf("TestUnknownTopicBecomesPoison: ghost events=%d -> rows %v; first poison %s after commit (timeout 3s, %d metadata retries logged); normal: %d delivered (dups %d), %d committed in the 1.5s window all delivered before the timeout, max latency %s; failed dlq retry took %s; topic never created; total %s",
		ghosts.CommittedCount(), countStatus(rows), deadAfter.Round(time.Millisecond), retries, rep.Delivered, rep.Duplicates, len(window), maxLat.Round(time.Millisecond),
		retryTook.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestPoisonSurvivesRestart: kill -9 with a quarantine in place and the slot
// held before the poison (an earlier event waits for a missing topic):
// the redelivered poison and parked events are neither published nor
// duplicated in the table; new events of the aggregate are parked.
func TestPoisonSurvivesRestart(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	relayEnv := []string{"OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m"}
	r1 := env.StartRelay(relayEnv...)
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	load := startDLLoad(t, env, others, 20, 2, 3, 10*time.Millisecond)

	// The blocker waits for its topic, so the slot cannot be confirmed past it.
	blockers := NewLedger()
	bw := env.NewWriter(blockers)
	bw.AggregateType = "blocker"
	blocker, err := bw.Write(ctx, []string{"b-1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	blockerTopic := "it." + env.Sfx + ".blocker"

	const P = "agg-restarted"
	pw := newAggWriter(env, P, others)
	before := pw.writeN(ctx, t, 5, 15*time.Millisecond)
	bad := `{"bad": 1}`
	poison, _ := pw.mustWrite(ctx, t, &bad, "")
	after := pw.writeN(ctx, t, 12, 15*time.Millisecond)
	rows1 := waitDL(t, env, P, 30*time.Second, "1 dead + 12 parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows1, poison, after, "headers")
	if !c.WaitFor(idsOf(before), 30*time.Second, 0) {
		t.Fatalf("events of %s before the poison not delivered", P)
	}
	// wall-clock: load flows a while before the kill, so it lands mid-stream
	time.Sleep(500 * time.Millisecond)
	poisonLSN, err := ParseLSN(rows1[0].TxLSN)
	if err != nil {
		t.Fatal(err)
	}
	cfKill := env.ConfirmedFlush()
	if cfKill >= poisonLSN {
		t.Fatalf("precondition: confirmed_flush_lsn %s already past the poison's commit %s (the blocker should hold it)", cfKill, poisonLSN)
	}
	deliveredAtKill := c.Count()
	r1.Kill9()
	t.Logf("killed relay #1 with confirmed_flush_lsn %s < poison commit %s: the poison and its parked events will be redelivered", cfKill, poisonLSN)
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatalf("slot still active 30s after kill -9")
	}
	r2 := env.StartRelay(relayEnv...)
	newer := pw.writeN(ctx, t, 8, 20*time.Millisecond)
	parked := append(append([]Event(nil), after...), newer...)
	rows2 := waitDL(t, env, P, 30*time.Second, "the new events parked too", func(r []dlRow) bool { return len(r) >= 1+len(parked) })
	checkQuarantine(t, rows2, poison, parked, "headers")
	// Wait until relay #2 has reprocessed the redelivered parked events.
	redelivered := func() int {
		n := 0
		log := r2.Log()
		for _, e := range after {
			if strings.Contains(log, e.ID) {
				n++
			}
		}
		return n
	}
	within(20*time.Second, 100*time.Millisecond, func() bool { return redelivered() == len(after) })
	reparked := redelivered()

	// Let the blocker through; the position then passes everything.
	env.CreateTopic(ctx, blockerTopic, env.Partitions)
	bc := StartConsumer(t, blockerTopic, env.Partitions)
	if !bc.WaitFor(blockers.Committed(), 60*time.Second, 0) {
		t.Fatalf("blocker event %s not delivered after its topic was created", blocker[0].ID)
	}
	// wall-clock: load flows on past the blocker before it stops
	time.Sleep(500 * time.Millisecond)
	load.Stop(t)
	mark := env.CurrentInsertLSN()
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return env.ConfirmedAtLeast(mark) }) {
		t.Fatalf("confirmed_flush_lsn %s did not pass %s", env.SlotInfo().ConfirmedFlush, mark)
	}
	expected := union(others.Committed(), idsOf(before))
	forbidden := idsOf([]Event{poison}, parked)
	if !c.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("not every event of the other aggregates arrived after the restart")
	}
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second, Forbidden: forbidden})
	RequireOK(t, rep)
	if seen := seenIDs(c.Records(), forbidden); len(seen) > 0 {
		t.Fatalf("%d redelivered/new events of the quarantined aggregate were published: %v", len(seen), seen)
	}
	rows := dlRows(t, env, P)
	checkQuarantine(t, rows, poison, parked, "headers")
	old := map[string]dlRow{}
	for _, r := range rows1 {
		old[r.EventID] = r
	}
	for _, r := range rows {
		if o, ok := old[r.EventID]; ok && (!o.FirstFailed.Equal(r.FirstFailed) || o.Attempts != r.Attempts || o.Status != r.Status || o.Reason != r.Reason) {
			t.Errorf("row rewritten by the redelivery: before %s (first_failed %s), after %s (first_failed %s)", o, o.FirstFailed, r, r.FirstFailed)
		}
	}
	if all := dlRows(t, env, ""); len(all) != len(rows) {
		t.Errorf("dead-letter rows of other aggregates: %v", all)
	}
	if !r2.Running() {
		t.Fatalf("relay #2 exited (code %d)", r2.exitCode)
	}
	msg := fmt.Sprintf("TestPoisonSurvivesRestart: killed at %d records with confirmed %s < poison %s; after restart: others=%d delivered=%d dups=%d; %s: rows=%d (dead 1, parked %d, %d redelivered ones re-parked per log), none published; total %s",
		deliveredAtKill, cfKill, poisonLSN, len(expected), rep.Delivered, rep.Duplicates, P, len(rows), len(parked), reparked, time.Since(t0).Round(time.Millisecond))
	t.Log(msg)
	fmt.Println(msg)
}

// TestDLQWaitsForRelayPosition: a dlq retry or discard publishes only once
// the relay's position (checkpoint or slot) is past the aggregate's
// earliest open event (issue 46). A blocker event whose topic is missing
// holds the position before the poison event; the retry and the discard
// then refuse, publish nothing and say to run them again once the relay
// has caught up. With the blocker through, a retry waits for the
// position and publishes the aggregate in order.
func TestDLQWaitsForRelayPosition(t *testing.T) {
	inSuites(t, parallel, stack)
	t0 := time.Now()
	env := NewEnv(t, EnvOptions{})
	dlCleanup(t, env)
	relay := env.StartRelay("OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m")
	c := StartConsumer(t, env.Topic, env.Partitions)
	others := NewLedger()
	waitCaughtUp(t, env, c, env.NewWriter(others), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The blocker waits for its topic, so the position cannot pass it.
	bw := env.NewWriter(NewLedger())
	bw.AggregateType = "blocker"
	if _, err := bw.Write(ctx, []string{"b-1"}, true); err != nil {
		t.Fatal(err)
	}
	const P = "agg-ahead"
	pw := newAggWriter(env, P, others)
	before := pw.writeN(ctx, t, 3, 10*time.Millisecond)
	bad := `{"bad": 1}`
	poison, _ := pw.mustWrite(ctx, t, &bad, "")
	after := pw.writeN(ctx, t, 5, 10*time.Millisecond)
	rows := waitDL(t, env, P, 30*time.Second, "1 dead + 5 parked", func(r []dlRow) bool { return len(r) >= 1+len(after) })
	checkQuarantine(t, rows, poison, after, "headers")
	poisonLSN := rows[0].TxLSN
	if !c.WaitFor(idsOf(before), 30*time.Second, 0) {
		t.Fatalf("events of %s before the poison not delivered", P)
	}
	// Fixed (the headers it should have had), the poison event would go
	// through: only the guard stops it.
	fixed, _ := json.Marshal(map[string]string{"trace_id": poison.TraceID})
	env.Exec(`update `+dlTable+` set headers = $3 where outbox_table = $1 and aggregate_id = $2 and status = 'dead'`, env.Table, P, string(fixed))

	for _, args := range [][]string{
		{"dlq", "retry", "--aggregate", P, "--wait", "1s"},
		{"dlq", "discard", poison.ID, "--reason", "never mind", "--wait", "0"},
	} {
		res := env.RunCLI(60*time.Second, nil, args...)
		t.Logf("%s: exit %d\n%s", strings.Join(args, " "), res.Code, tail(res.Stderr, 3))
		if res.Code != 1 || strings.Contains(res.Stdout, "published") {
			t.Fatalf("%s with the position before %s: exit %d, want 1 with nothing published\nstdout:\n%s\nstderr:\n%s",
				strings.Join(args, " "), poisonLSN, res.Code, res.Stdout, tail(res.Stderr, 10))
		}
		for _, want := range []string{"nothing published", poison.ID, poisonLSN, "not yet behind the relay's delivered position",
			"Run the command again once the relay has caught up", "outbox-relay checkpoint show"} {
			if !strings.Contains(res.Stderr, want) {
				t.Errorf("%s: the refusal does not say %q:\n%s", strings.Join(args, " "), want, tail(res.Stderr, 10))
			}
		}
	}
	rows = dlRows(t, env, P)
	checkQuarantine(t, rows, poison, after, "headers")
	if rows[0].Attempts != 1 {
		t.Errorf("poison row after the refusals: attempts %d, want 1 (nothing tried)", rows[0].Attempts)
	}

	// The blocker goes through; a retry started at once waits for the
	// position, then publishes the aggregate in order.
	env.CreateTopic(ctx, "it."+env.Sfx+".blocker", env.Partitions)
	retryStart := time.Now()
	res := env.RunCLI(2*time.Minute, nil, "dlq", "retry", "--aggregate", P, "--wait", "90s")
	took := time.Since(retryStart).Round(time.Millisecond)
	waited := strings.Contains(res.Stderr, "waiting for the relay's position")
	t.Logf("dlq retry after the blocker: exit %d in %s (waited for the position: %v)\n%s\n%s", res.Code, took, waited, tail(res.Stdout, 3), tail(res.Stderr, 3))
	if res.Code != 0 || !strings.Contains(res.Stdout, "quarantine lifted") {
		t.Fatalf("dlq retry after the blocker: exit %d\nstdout:\n%s\nstderr:\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	final := pw.writeN(ctx, t, 3, 10*time.Millisecond)
	allP := append(append(append(append([]Event(nil), before...), poison), after...), final...)
	expected := union(others.Committed(), idsOf(allP))
	if !c.WaitFor(expected, 60*time.Second, 2*time.Second) {
		t.Fatalf("not every event arrived after the retry (missing %d)", c.Missing(expected))
	}
	dups := checkAggStream(t, c.Records(), P, allP)
	RequireOK(t, c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second}))
	if !relay.Running() {
		t.Fatalf("relay exited (code %d)", relay.exitCode)
	}
	t.Logf("TestDLQWaitsForRelayPosition: retry and discard refused with the position before %s; after the blocker the retry took %s (waited: %v) and published %d events of %s in order (dups %d); total %s",
		poisonLSN, took, waited, len(allP), P, dups, time.Since(t0).Round(time.Millisecond))
}
