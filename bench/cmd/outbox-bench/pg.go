package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
)

// payloadSQL renders a ~300-byte JSON object for row number j (a bigint
// SQL expression). The preload and the latency writers use the same one.
func payloadSQL(j string) string {
	return fmt.Sprintf(`jsonb_build_object('order_id', %[1]s, 'customer_id', 'cust-' || (%[1]s %% 5000), `+
		`'amount_cents', (%[1]s * 7919) %% 100000, 'currency', 'EUR', 'status', 'confirmed', 'note', repeat('x', 175))`, j)
}

// insertSQL inserts rows [lo, hi] (bigint SQL expressions) into table.
func insertSQL(table, lo, hi string) string {
	return fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
SELECT gen_random_uuid(), 'bench', 'agg-' || (j %% 1000), j, 'bench.created', 1, %s
FROM generate_series((%s)::bigint, (%s)::bigint) AS j`, table, payloadSQL("j"), lo, hi)
}

// target is one outbox table with its slot and publication (and, for a
// drain, the ceiling slot created at the same WAL position).
type target struct {
	tag     string
	table   string
	slot    string
	pub     string
	ceiling string

	ceilingCreated bool
}

func (b *bench) newTarget(ctx context.Context, tag string, withCeiling bool) (*target, error) {
	t := &target{
		tag:   tag,
		table: b.schema + ".outbox_" + tag,
		slot:  b.prefix + "_" + tag,
		pub:   b.prefix + "_" + tag,
	}
	t.ceiling = t.slot + "_ceiling"
	b.mu.Lock()
	b.targets = append(b.targets, t)
	b.mu.Unlock()

	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, b.cfg.RelayBin, "migrate")
	cmd.Env = b.relayEnv(t, "", "")
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(b.cfg.LogDir, "migrate-"+tag+".log"), out, 0o644)
	if err != nil {
		return t, fmt.Errorf("outbox-relay migrate (%s): %w: %s", t.table, err, strings.TrimSpace(lastLines(string(out), 5)))
	}
	if withCeiling {
		// Right after migrate and before any insert: both slots start at
		// the same point of the WAL, so both read exactly the same.
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if _, err := b.pool.Exec(sctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, t.ceiling); err != nil {
			return t, fmt.Errorf("create ceiling slot %s: %w", t.ceiling, err)
		}
		t.ceilingCreated = true
	}
	return t, nil
}

// preload commits n events in transactions of txSize events from
// cfg.Parallel connections, each running one server-side loop with a
// COMMIT per iteration (synchronous_commit off: the WAL is the same, the
// preload is just faster).
func (b *bench) preload(ctx context.Context, t *target, n, txSize int) error {
	conns := max(1, min(b.cfg.Parallel, n/txSize))
	txs := (n + txSize - 1) / txSize
	g, gctx := errgroup.WithContext(ctx)
	first := 0
	for c := range conns {
		cnt := txs / conns
		if c < txs%conns {
			cnt++
		}
		lo, hi := first, min(first+cnt*txSize, n)-1
		first = hi + 1
		if lo > hi {
			continue
		}
		g.Go(func() error {
			conn, err := pgx.Connect(gctx, b.cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(gctx, `SET synchronous_commit = off`); err != nil {
				return err
			}
			sql := fmt.Sprintf(`DO $bench$
DECLARE i bigint;
BEGIN
  FOR i IN %d..%d BY %d LOOP
    %s;
    COMMIT;
  END LOOP;
END
$bench$`, lo, hi, txSize, insertSQL(t.table, "i", fmt.Sprintf("least(i + %d, %d)", txSize-1, hi)))
			_, err = conn.Exec(gctx, sql)
			return err
		})
	}
	return g.Wait()
}

// walInsertLSN is the current WAL insert position.
func (b *bench) walInsertLSN(ctx context.Context) (pglogrepl.LSN, error) {
	var s string
	if err := b.pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// fence commits a tiny synchronous transaction (a transactional logical
// message, relayed by nobody) after lsn: it flushes the asynchronously
// committed preload, so both readers find the whole backlog durable, and
// it puts WAL beyond lsn, so pg_recvlogical --endpos has something to
// stop at.
func (b *bench) fence(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = on`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox_bench.fence', '')`); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// slotInfo reads a slot's confirmed_flush_lsn and the pid streaming it.
func (b *bench) slotInfo(ctx context.Context, slot string) (pglogrepl.LSN, int, error) {
	var lsn *string
	var pid *int32
	err := b.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn, &pid)
	if err != nil {
		return 0, 0, err
	}
	var l pglogrepl.LSN
	if lsn != nil {
		if l, err = pglogrepl.ParseLSN(*lsn); err != nil {
			return 0, 0, err
		}
	}
	p := 0
	if pid != nil {
		p = int(*pid)
	}
	return l, p, nil
}

// pgStartTime is the postmaster's start time: a change during a phase
// means somebody restarted PostgreSQL under the measurement.
func (b *bench) pgStartTime(ctx context.Context) time.Time {
	var t time.Time
	_ = b.pool.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&t)
	return t
}

// walsenderCPU samples the CPU time of the walsender serving slot every
// 50 ms until stopped, and returns the CPU seconds it used (the last
// sample per pid; a walsender that ends between samples loses < 50 ms).
type walsenderCPU struct {
	mu   sync.Mutex
	last map[int]float64
	base map[int]float64
	stop chan struct{}
	done chan struct{}
}

func (b *bench) watchWalsender(ctx context.Context, slot string) *walsenderCPU {
	w := &walsenderCPU{last: map[int]float64{}, base: map[int]float64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, pid, err := b.slotInfo(qctx, slot)
			cancel()
			if err == nil && pid > 0 {
				if cpu, err := benchkit.ProcCPU(pid); err == nil {
					w.mu.Lock()
					if _, ok := w.base[pid]; !ok {
						w.base[pid] = cpu
					}
					w.last[pid] = cpu
					w.mu.Unlock()
				}
			}
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// seconds stops sampling and returns the CPU seconds seen. A walsender
// first seen after it had started counts from its first sample.
func (w *walsenderCPU) seconds() float64 {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	total := 0.0
	for pid, v := range w.last {
		total += v - w.base[pid]
	}
	return total
}

// waitConfirmed polls the slot every 25 ms until its confirmed_flush_lsn
// reaches lsn, and returns when it saw that.
func (b *bench) waitConfirmed(ctx context.Context, slot string, lsn pglogrepl.LSN, timeout time.Duration, alive func() error) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(25 * time.Millisecond)
	defer t.Stop()
	for {
		cur, _, err := b.slotInfo(ctx, slot)
		if err == nil && cur >= lsn {
			return time.Now(), nil
		}
		if alive != nil {
			if err := alive(); err != nil {
				return time.Time{}, err
			}
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("slot %s did not reach %s within %s (at %s, last error %v)", slot, lsn, timeout, cur, err)
		case <-t.C:
		}
	}
}

// dropSlot drops a slot, terminating a leftover walsender of ours if one
// still holds it.
func (b *bench) dropSlot(ctx context.Context, slot string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := b.pool.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1`, slot)
		if err == nil {
			return nil
		}
		if attempt >= 20 || ctx.Err() != nil {
			return fmt.Errorf("drop slot %s: %w", slot, err)
		}
		if attempt >= 5 {
			_, _ = b.pool.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// dropTarget removes a target's slots and publication (its table goes
// with the run's schema).
func (b *bench) dropTarget(ctx context.Context, t *target) error {
	var errs []error
	if t.ceilingCreated {
		if err := b.dropSlot(ctx, t.ceiling); err != nil {
			errs = append(errs, err)
		} else {
			t.ceilingCreated = false
		}
	}
	if b.cfg.Keep {
		return errors.Join(errs...)
	}
	if err := b.dropSlot(ctx, t.slot); err != nil {
		errs = append(errs, err)
	}
	if _, err := b.pool.Exec(ctx, `DROP PUBLICATION IF EXISTS `+pgx.Identifier{t.pub}.Sanitize()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dropStale removes objects of earlier runs whose run id is older than
// age (0: all, as long as their slots are not in use).
func (b *bench) dropStale(ctx context.Context, age time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	stale := func(name string) bool {
		if !strings.HasPrefix(name, prefixBase) || strings.HasPrefix(name, b.prefix) {
			return false
		}
		ts, ok := runIDTime(name)
		return ok && (age == 0 || time.Since(ts) > age)
	}
	rows, err := b.pool.Query(ctx, `SELECT slot_name, active FROM pg_replication_slots WHERE slot_name LIKE 'outbox\_bench\_%'`)
	if err == nil {
		var slots []string
		for rows.Next() {
			var name string
			var active bool
			if rows.Scan(&name, &active) == nil && stale(name) && !active {
				slots = append(slots, name)
			}
		}
		rows.Close()
		for _, s := range slots {
			if err := b.dropSlot(ctx, s); err == nil {
				b.logf("dropped slot %s of an earlier run", s)
			}
		}
	}
	for _, q := range []struct{ list, drop string }{
		{`SELECT pubname FROM pg_publication WHERE pubname LIKE 'outbox\_bench\_%'`, `DROP PUBLICATION IF EXISTS %s`},
		{`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'outbox\_bench\_%'`, `DROP SCHEMA IF EXISTS %s CASCADE`},
	} {
		rows, err := b.pool.Query(ctx, q.list)
		if err != nil {
			continue
		}
		var names []string
		for rows.Next() {
			var name string
			if rows.Scan(&name) == nil && stale(name) {
				names = append(names, name)
			}
		}
		rows.Close()
		for _, n := range names {
			if _, err := b.pool.Exec(ctx, fmt.Sprintf(q.drop, pgx.Identifier{n}.Sanitize())); err == nil {
				b.logf("dropped %s of an earlier run", n)
			}
		}
	}
	b.dropStaleTopics(ctx, stale)
	b.dropStaleSubjects(ctx, stale)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
