//go:build integration

package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// schemaLoad runs `writers` goroutines that each commit transactions of
// eventsPerTx events (own aggregates per writer, so versions increase in
// commit order) until stop is closed or maxTx transactions are written.
type schemaLoad struct {
	wg   sync.WaitGroup
	stop chan struct{}
	txs  atomic.Int64
	errs chan error
}

func startSchemaLoad(t *testing.T, env *Env, ledger *Ledger, writers, eventsPerTx, maxTx int) *schemaLoad {
	t.Helper()
	l := &schemaLoad{stop: make(chan struct{}), errs: make(chan error, writers)}
	for w := 0; w < writers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			wr := env.NewWriter(ledger)
			for tx := 0; tx < maxTx; tx++ {
				select {
				case <-l.stop:
					return
				default:
				}
				ids := make([]string, eventsPerTx)
				for i := range ids {
					ids[i] = fmt.Sprintf("sc-w%d-a%02d", w, (tx*eventsPerTx+i)%40)
				}
				if _, err := wr.Write(ctx, ids, true); err != nil {
					l.errs <- fmt.Errorf("writer %d tx %d: %w", w, tx, err)
					return
				}
				l.txs.Add(1)
			}
		}(w)
	}
	return l
}

// Wait waits for the writers to finish their transactions.
func (l *schemaLoad) Wait(t *testing.T) {
	t.Helper()
	l.wg.Wait()
	select {
	case err := <-l.errs:
		t.Fatal(err)
	default:
	}
}

// Stop stops the writers and fails the test on a write error.
func (l *schemaLoad) Stop(t *testing.T) {
	t.Helper()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	select {
	case err := <-l.errs:
		t.Fatal(err)
	default:
	}
}

// streamingLines counts the relay's "streaming" log lines: one per
// replication connection, so more than one means it reconnected.
func streamingLines(r *Relay) int {
	return len(r.LogLines(`"message":"streaming"`, 100))
}

// slotInfoRetry reads the env's slot, retrying for a while: other tests of
// the suite restart the shared PostgreSQL, which kills pooled connections.
func slotInfoRetry(t *testing.T, env *Env) SlotInfo {
	t.Helper()
	var s SlotInfo
	var err error
	if !within(20*time.Second, 250*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err = Slot(ctx, env.DB, env.Slot)
		return err == nil
	}) {
		t.Fatalf("slot %s: %v", env.Slot, err)
	}
	return s
}

func TestSchemaChange(t *testing.T) {
	inSuites(t, parallel, stack|pgVersions)
	t.Run("AddColumnWhileStreaming", func(t *testing.T) {
		env := NewEnv(t, EnvOptions{})
		relay := env.StartRelay()
		c := StartConsumer(t, env.Topic, env.Partitions)
		ledger := NewLedger()
		load := startSchemaLoad(t, env, ledger, 3, 5, 120)

		if !within(30*time.Second, 20*time.Millisecond, func() bool { return ledger.CommittedCount() >= 400 }) {
			t.Fatalf("writers committed only %d events in 30s", ledger.CommittedCount())
		}
		before := ledger.CommittedCount()
		start := time.Now()
		env.Exec(`alter table ` + env.QuotedTable() + ` add column tenant text`)
		t.Logf("ALTER TABLE ADD COLUMN tenant text after %d committed events, took %s", before, time.Since(start).Round(time.Millisecond))
		// Rows that carry the new column, too.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		wr := env.NewWriter(ledger)
		tenantEvs := wr.NextEvents([]string{"sc-tenant-1", "sc-tenant-2"})
		for _, e := range tenantEvs {
			payload := fmt.Sprintf(`{"aggregate_id": %q, "version": %d}`, e.AggregateID, e.Version)
			headers := fmt.Sprintf(`{"trace_id": %q}`, e.TraceID)
			if _, err := env.DB.Exec(ctx, `insert into `+env.QuotedTable()+` (event_id, aggregate_type, aggregate_id, aggregate_version,
				event_type, schema_version, payload, headers, tenant) values ($1::uuid, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb, 'acme')`,
				e.ID, e.AggregateType, e.AggregateID, e.Version, e.EventType, e.SchemaVersion, payload, headers); err != nil {
				t.Fatalf("insert with tenant: %v", err)
			}
		}
		ledger.addCommitted(tenantEvs, "")
		load.Wait(t) // the writers keep going through and after the ALTER

		committed := ledger.Committed()
		t.Logf("committed %d events (%d before the ALTER) in %d transactions", len(committed), before, load.txs.Load()+1)
		ok := c.WaitFor(committed, 60*time.Second, time.Second)
		rep := c.Check(committed, CheckOptions{TimestampSkew: 10 * time.Second})
		t.Logf("AddColumnWhileStreaming: %s", rep)
		if !ok {
			t.Errorf("not every committed event arrived")
		}
		RequireOK(t, rep)
		if !relay.Running() {
			t.Fatalf("relay exited (code %d) after ADD COLUMN; tail:\n%s", relay.exitCode, relay.LogTail(20))
		}
		if n := streamingLines(relay); n != 1 {
			t.Errorf("relay opened %d replication connections, want 1 (no restart on ADD COLUMN); tail:\n%s", n, relay.LogTail(20))
		}
		if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
			t.Fatalf("SIGTERM: exited=%v code=%d, want 0", exited, code)
		}
	})

	// A required column dropped or retyped under the running relay: the
	// next outbox row cannot be mapped, so the relay must stop (exit 1)
	// with an error naming the column, the slot held before that row, and
	// everything committed before the ALTER delivered.
	breaking := []struct {
		name  string
		alter []string // statements, %s = the quoted table
		// insert is the row after the ALTER; $1 is the event id.
		insert string
		want   string
	}{
		{
			name:   "DropRequiredColumn",
			alter:  []string{`alter table %s drop column aggregate_version`},
			insert: `insert into %s (event_id, aggregate_type, aggregate_id, event_type, schema_version, payload) values ($1, 'order', 'sc-after', 'OrderUpdated', 3, '{}')`,
			want:   `missing column "aggregate_version"`,
		},
		{
			name:   "RetypeRequiredColumn",
			alter:  []string{`alter table %s alter column schema_version type text`},
			insert: `insert into %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload) values ($1, 'order', 'sc-after', 1, 'OrderUpdated', 'v3', '{}')`,
			want:   `column "schema_version" has type`,
		},
	}
	for _, tc := range breaking {
		t.Run(tc.name, func(t *testing.T) {
			env := NewEnv(t, EnvOptions{})
			relay := env.StartRelay()
			c := StartConsumer(t, env.Topic, env.Partitions)
			// Streaming (the slot active) before the load and the ALTER: a
			// relay still starting would refuse the altered table in its
			// start-up check, not the stream path this test is about (a
			// loaded machine made that race visible).
			if !env.WaitSlotActive(true, 30*time.Second) {
				t.Fatalf("relay not streaming within 30s; tail:\n%s", relay.LogTail(20))
			}
			ledger := NewLedger()
			load := startSchemaLoad(t, env, ledger, 2, 5, 60)
			if !within(30*time.Second, 20*time.Millisecond, func() bool { return ledger.CommittedCount() >= 300 }) {
				t.Fatalf("writers committed only %d events in 30s", ledger.CommittedCount())
			}
			// The writers' INSERT names the column, so they stop first;
			// the relay is still streaming their last transactions.
			load.Stop(t)
			committed := ledger.Committed()
			for _, stmt := range tc.alter {
				env.Exec(fmt.Sprintf(stmt, env.QuotedTable()))
			}
			poisonID := "0190a1b2-0000-7000-8000-00000000dead"
			env.Exec(fmt.Sprintf(tc.insert, env.QuotedTable()), poisonID)
			after := env.CurrentInsertLSN()
			t.Logf("%d events committed before the ALTER; poison row committed, WAL insert LSN %s", len(committed), after)

			start := time.Now()
			code, exited := relay.Wait(30 * time.Second)
			if !exited {
				t.Fatalf("relay still running 30s after the %s, want exit 1; tail:\n%s", tc.name, relay.LogTail(20))
			}
			t.Logf("relay exit %d after %s; error lines: %v", code, time.Since(start).Round(time.Millisecond),
				relay.LogLines(strings.Split(tc.want, `"`)[0], 3))
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			if !relay.LogContains(tc.want) {
				t.Errorf("relay log does not contain %q; tail:\n%s", tc.want, relay.LogTail(20))
			}

			ok := c.WaitFor(committed, 15*time.Second, time.Second)
			rep := c.Check(committed, CheckOptions{})
			t.Logf("%s: %s", tc.name, rep)
			if !ok {
				t.Errorf("%d of %d events committed before the ALTER were not delivered before the relay stopped: "+
					"the stream error abandoned events of earlier, fully decoded transactions instead of draining them",
					len(rep.Lost), len(committed))
			}
			for _, r := range c.Records() {
				if r.EventID() == poisonID {
					t.Errorf("the row after the ALTER was published: %+v", r)
				}
			}

			s := slotInfoRetry(t, env)
			afterLSN, err := ParseLSN(after)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("slot: confirmed_flush_lsn %s, active %v; poison transaction ends before %s", s.ConfirmedFlush, s.Active, after)
			if !s.Exists || s.ConfirmedFlushLSN >= afterLSN {
				t.Errorf("confirmed_flush_lsn %s is not before the poison transaction (WAL insert LSN after its commit %s): the row would be skipped",
					s.ConfirmedFlush, after)
			}
			// wall-clock: still held a moment later (negative check: nothing confirms after the exit).
			time.Sleep(500 * time.Millisecond)
			if s2 := slotInfoRetry(t, env); s2.ConfirmedFlushLSN != s.ConfirmedFlushLSN {
				t.Errorf("confirmed_flush_lsn moved after the relay stopped: %s -> %s", s.ConfirmedFlush, s2.ConfirmedFlush)
			}
			if ok {
				return
			}
			// Nothing is lost while the slot is held, but is anything
			// delivered before the table is fixed? A restarted relay
			// would decode the earlier transactions with their own
			// (historic) relation, if it gets to stream at all.
			relay2 := env.StartRelay()
			code2, exited2 := relay2.Wait(30 * time.Second)
			ok2 := c.WaitFor(committed, 5*time.Second, 500*time.Millisecond)
			rep2 := c.Check(committed, CheckOptions{})
			s3 := slotInfoRetry(t, env)
			t.Logf("restarted relay: exited=%v code=%d, %s; confirmed_flush_lsn %s", exited2, code2, rep2, s3.ConfirmedFlush)
			if !exited2 || code2 != 1 || !relay2.LogContains(tc.want) {
				t.Errorf("restarted relay: exited=%v code=%d, want exit 1 with %q again", exited2, code2, tc.want)
			}
			if !ok2 {
				t.Errorf("after a restart %d of %d pre-ALTER events are still undelivered: they stay stuck behind the "+
					"unmappable row until the table is fixed (restart: %v)", len(rep2.Lost), len(committed), relay2.LogLines(tc.want, 1))
			}
			if s3.ConfirmedFlushLSN >= afterLSN {
				t.Errorf("confirmed_flush_lsn %s passed the poison transaction (%s) after the restart", s3.ConfirmedFlush, after)
			}
		})
	}
}
