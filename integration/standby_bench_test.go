//go:build integration

package integration

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/slot"
)

// BenchmarkDecodeOnStandby measures issue 38's trade: the relay decoding
// on the primary against decoding on a hot standby of it (--replication-url),
// on one primary/standby pair of the PostgreSQL under test
// (OUTBOX_RELAY_TEST_PG_BIN, 16+), the standby attached in both modes.
//
//   - Drain: the same backlog (STANDBY_BENCH_N events, default
//     100,000, in 1-event transactions, replayed by the standby before the
//     clock starts) per mode and round, timed from the relay's start until
//     its slot confirmed the end of the backlog; with the CPU time the
//     primary's and the standby's PostgreSQL processes used meanwhile
//     (utime + stime of the postmaster's children, from /proc).
//   - Latency: 1,000 events/s in 1-event transactions for
//     STANDBY_BENCH_WINDOW (default 10s) to a caught-up relay;
//     commit → receipt per record (the record's timestamp is the commit
//     time, to the millisecond), and the standby's replay lag as the
//     primary reports it (pg_stat_replication.replay_lag), sampled.
//
// It is not part of make test (a benchmark); docs/benchmarks.md has the
// command and the numbers:
//
//	OUTBOX_RELAY_TEST_PG_BIN=.stack/pg-bin/17/bin go test -tags integration -run '^$' \
//	    -bench BenchmarkDecodeOnStandby -benchtime 1x -timeout 20m ./integration/
func BenchmarkDecodeOnStandby(b *testing.B) {
	bin := testPGBin(b)
	major := testPGMajor(b, bin)
	if major < 16 {
		b.Skipf("decoding on a standby needs PostgreSQL 16+; OUTBOX_RELAY_TEST_PG_BIN=%s is PostgreSQL %d", bin, major)
	}
	requireRelay(b)
	n := benchEnvInt(b, "STANDBY_BENCH_N", 100000)
	rounds := benchEnvInt(b, "STANDBY_BENCH_ROUNDS", 2)
	window, err := time.ParseDuration(cmp.Or(os.Getenv("STANDBY_BENCH_WINDOW"), "10s"))
	if err != nil {
		b.Fatal(err)
	}
	p := StartTempClusterBin(b, bin, "wal_level=logical")
	s := p.StartStandby(b, "sb_bench", "hot_standby_feedback=on")
	modes := []string{"primary", "standby"}
	for range b.N {
		var lines []string
		for round := range rounds {
			for _, mode := range modes {
				d := benchDrain(b, p, s, mode, n)
				lines = append(lines, fmt.Sprintf("drain round %d, decoding on the %-7s: %s", round+1, mode, d))
				b.ReportMetric(float64(n)/d.took.Seconds(), mode+"-events/s")
			}
		}
		for _, mode := range modes {
			lines = append(lines, fmt.Sprintf("latency at 1,000 events/s, decoding on the %-7s: %s", mode, benchLatency(b, p, s, mode, window)))
		}
		// Printed, not logged: a benchmark's log is cut short without -v.
		fmt.Printf("BenchmarkDecodeOnStandby, PostgreSQL %d, %d events per drain:\n%s\n", major, n, strings.Join(lines, "\n"))
	}
}

// benchEnvInt is the environment variable name as an int, def when unset.
func benchEnvInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	i, err := strconv.Atoi(v)
	if err != nil || i <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return i
}

// benchEnv is an outbox on the pair whose slot is on the primary or, for
// mode "standby", on the standby, and the relay's environment for it.
func benchEnv(b *testing.B, p, s *TempCluster, mode string) (*Env, []string) {
	b.Helper()
	cli := []string{"OUTBOX_RELAY_FAILOVER_SLOT=false", "OUTBOX_RELAY_LOG_LEVEL=info"}
	if mode == "standby" {
		cli = append(cli, "OUTBOX_RELAY_REPLICATION_URL="+s.DBURL("postgres"))
	}
	return pairEnv(b, p.DBURL("postgres"), cli), cli
}

// drainResult is one drain.
type drainResult struct {
	n                      int
	ceiling                time.Duration // pg_recvlogical's drain of the same WAL on the same server
	took                   time.Duration
	primaryCPU, standbyCPU time.Duration
	walBytes               int64
}

func (d drainResult) String() string {
	return fmt.Sprintf("pg_recvlogical %s, relay %s (%.0f events/s, %.2f × pg_recvlogical); CPU of the primary's PostgreSQL %s, of the standby's %s; %d MB of WAL",
		d.ceiling.Round(time.Millisecond), d.took.Round(time.Millisecond), float64(d.n)/d.took.Seconds(), d.ceiling.Seconds()/d.took.Seconds(), d.primaryCPU.Round(10*time.Millisecond), d.standbyCPU.Round(10*time.Millisecond), d.walBytes>>20)
}

// benchDrain preloads n events, waits until the standby replayed them,
// and times the relay's drain of them.
func benchDrain(b *testing.B, p, s *TempCluster, mode string, n int) drainResult {
	b.Helper()
	env, cli := benchEnv(b, p, s, mode)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	slotOn := p
	if mode == "standby" {
		slotOn = s
	}
	// The ceiling's slot, beside the relay's on the same server, before
	// any event: both read exactly the same WAL.
	ceilingSlot := env.Slot + "_ceiling"
	sdb, err := pgxpool.New(ctx, slotOn.DBURL("postgres"))
	if err != nil {
		b.Fatal(err)
	}
	defer sdb.Close()
	cfg := slot.Config{Name: ceilingSlot, NoFailover: true}
	if mode == "standby" {
		cfg.Primary = env.DB
	}
	ceiling := slot.NewManager(sdb, cfg)
	if _, err := ceiling.Create(ctx); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ceiling.Drop(context.Background()) }()
	var start string
	if err := env.DB.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&start); err != nil {
		b.Fatal(err)
	}
	benchPreload(b, ctx, env, n)
	var end string
	if err := env.DB.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&end); err != nil {
		b.Fatal(err)
	}
	env.Exec(`SELECT txid_current()`) // a synchronous commit: the backlog is durable
	s.WaitReplayed(b, end, 5*time.Minute)
	// One after the other (2 cores): pg_recvlogical, then the relay.
	c0 := time.Now()
	out, err := exec.CommandContext(ctx, "/usr/lib/postgresql/15/bin/pg_recvlogical", "-d", slotOn.DBURL("postgres"), "--slot", ceilingSlot, "--start",
		"-o", "proto_version=1", "-o", "publication_names="+env.Publication, "--endpos", end, "--no-loop", "-f", "/dev/null").CombinedOutput()
	if err != nil {
		b.Fatalf("pg_recvlogical: %v\n%s", err, out)
	}
	ceilingTook := time.Since(c0)
	pc0, sc0 := clusterCPU(b, p), clusterCPU(b, s)
	t0 := time.Now()
	relay := env.StartRelay(cli...)
	slotOn.WaitFor(b, 5*time.Minute, "postgres",
		`SELECT coalesce((SELECT (confirmed_flush_lsn >= $2::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = $1), 'missing')`, "true", env.Slot, end)
	d := drainResult{n: n, took: time.Since(t0), ceiling: ceilingTook}
	d.primaryCPU, d.standbyCPU = clusterCPU(b, p)-pc0, clusterCPU(b, s)-sc0
	relay.Term(20 * time.Second)
	s0, _ := ParseLSN(start)
	e0, _ := ParseLSN(end)
	d.walBytes = int64(e0 - s0)
	return d
}

// benchPreload commits n events in 1-event transactions, server-side, on
// two connections (synchronous_commit off: the WAL is the same).
func benchPreload(b *testing.B, ctx context.Context, env *Env, n int) {
	b.Helper()
	const conns = 2
	errs := make(chan error, conns)
	for c := range conns {
		lo, hi := c*n/conns, (c+1)*n/conns-1
		go func() {
			conn, err := pgx.Connect(ctx, env.DatabaseURL)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(context.Background())
			if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
				errs <- err
				return
			}
			_, err = conn.Exec(ctx, fmt.Sprintf(`DO $bench$
DECLARE i bigint;
BEGIN
  FOR i IN %d..%d LOOP
    INSERT INTO %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
    VALUES (gen_random_uuid(), %s, 'agg-' || (i %% 1000), i, 'bench.created', 1,
      jsonb_build_object('order_id', i, 'customer_id', 'cust-' || (i %% 5000), 'amount_cents', (i * 7919) %% 100000,
        'currency', 'EUR', 'status', 'confirmed', 'note', repeat('x', 175)));
    COMMIT;
  END LOOP;
END
$bench$`, lo, hi, env.QuotedTable(), quoteLiteral(env.AggType)))
			errs <- err
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			b.Fatalf("preload: %v", err)
		}
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// clusterCPU is the CPU time (utime + stime) the cluster's postmaster and
// its children have used so far, from /proc (CLK_TCK 100). Processes that
// exited meanwhile are missed: the backends of the bench are long-lived.
func clusterCPU(b *testing.B, c *TempCluster) time.Duration {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join(c.Data, "postmaster.pid"))
	if err != nil {
		b.Fatal(err)
	}
	pm, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(raw), "\n", 2)[0]))
	if err != nil {
		b.Fatal(err)
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, f := range dirs {
		st, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15): fields after the
		// last ')' start at state (field 3).
		rest := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
		if len(rest) < 13 {
			continue
		}
		pid, _ := strconv.Atoi(strings.Fields(string(st))[0])
		ppid, _ := strconv.Atoi(rest[1])
		if pid != pm && ppid != pm {
			continue
		}
		u, _ := strconv.ParseInt(rest[11], 10, 64)
		s, _ := strconv.ParseInt(rest[12], 10, 64)
		ticks += u + s
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// latencyResult is one latency window.
type latencyResult struct {
	p50, p99, max        time.Duration
	records              int
	replayP50, replayP99 time.Duration
	replaySamples        int
}

func (l latencyResult) String() string {
	s := fmt.Sprintf("commit → receipt p50 %s, p99 %s, max %s over %d records", l.p50, l.p99, l.max, l.records)
	if l.replaySamples > 0 {
		s += fmt.Sprintf("; standby replay_lag p50 %s, p99 %s (%d samples)", l.replayP50, l.replayP99, l.replaySamples)
	}
	return s
}

// benchLatency runs a caught-up relay while one connection commits
// 1,000 events/s, one per transaction, open loop, for window.
func benchLatency(b *testing.B, p, s *TempCluster, mode string, window time.Duration) latencyResult {
	b.Helper()
	env, cli := benchEnv(b, p, s, mode)
	consumer := StartConsumer(b, env.Topic, env.Partitions)
	defer consumer.Stop()
	relay := env.StartRelay(cli...)
	defer relay.Term(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), window+time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, env.DatabaseURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(context.Background())
	// Warm up: the relay streams before the window starts.
	insert := fmt.Sprintf(`INSERT INTO %s (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload)
		VALUES (gen_random_uuid(), %s, 'agg-' || ($1::bigint %% 1000), $1, 'bench.created', 1, '{"note":"latency"}')`, env.QuotedTable(), quoteLiteral(env.AggType))
	if _, err := conn.Exec(ctx, insert, 0); err != nil {
		b.Fatal(err)
	}
	if !consumer.WaitCount(1, time.Minute) {
		b.Fatalf("the relay did not deliver\n%s", relay.LogTail(20))
	}

	var replay []time.Duration
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond) // the replay lag's sampling interval
		defer tick.Stop()
		for {
			var lag *float64
			err := env.DB.QueryRow(ctx, `SELECT extract(epoch FROM replay_lag)::float8 FROM pg_stat_replication WHERE application_name = 'sb_bench'`).Scan(&lag)
			if err == nil && lag != nil {
				replay = append(replay, time.Duration(*lag*float64(time.Second)))
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start, rate := time.Now(), time.Millisecond
	total := int(window / rate)
	for i := 1; i <= total; i++ {
		if wait := time.Until(start.Add(time.Duration(i) * rate)); wait > 0 {
			// wall-clock: the offered load's open-loop schedule is real
			// time (a ticker would drop the ticks a slow commit missed)
			time.Sleep(wait)
		}
		if _, err := conn.Exec(ctx, insert, i); err != nil {
			b.Fatal(err)
		}
	}
	close(stop)
	<-sampled
	if !consumer.WaitCount(total+1, time.Minute) {
		b.Fatalf("%d of %d records delivered", consumer.Count(), total+1)
	}
	var lat []time.Duration
	for _, rec := range consumer.Records() {
		lat = append(lat, rec.Seen.Sub(rec.Time))
	}
	res := latencyResult{records: len(lat), replaySamples: len(replay)}
	res.p50, res.p99, res.max = percentile(lat, 0.50), percentile(lat, 0.99), percentile(lat, 1)
	res.replayP50, res.replayP99 = percentile(replay, 0.50), percentile(replay, 0.99)
	return res
}

// percentile is the q-quantile of ds (nearest rank), rounded to 0.1 ms.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	ds = slices.Clone(ds)
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	i = min(max(i, 0), len(ds)-1)
	return ds[i].Round(100 * time.Microsecond)
}
