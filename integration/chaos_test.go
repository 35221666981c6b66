//go:build integration

package integration

// TestChaos: steady outbox write load while a fault schedule drawn from a seed
// runs against the real stack - kill -9 of the relay, broker stop/start,
// PostgreSQL restart, network cuts and hangs through TCP proxies (the relay
// reaches PostgreSQL and Kafka only through proxy_test.go's proxies) - then
// every committed event must be in Kafka, per-aggregate first occurrences in
// order.
//
//	go test -tags integration -run TestChaos -count=1 -v ./integration/                      # short, ~2 min
//	go test -tags integration -run TestChaos -count=1 -v ./integration/ -args -chaos.long    # make chaos
//	... -args -chaos.seed=42      (or OUTBOX_RELAY_CHAOS_SEED=42; OUTBOX_RELAY_CHAOS_LONG=1)
//
// Recovery time of a fault = time from the end of the fault (relay restarted,
// broker back, PostgreSQL back, proxy restored) until the slot's
// confirmed_flush_lsn passes pg_current_wal_insert_lsn() captured right after
// a canary event committed at the end of the fault. The slot only moves past
// an LSN once Kafka acknowledged every event before it, so this is "the relay
// has caught up with everything committed before the fault ended". It includes
// up to one --status-interval (1 s) of status-update latency. The canary's own
// delivery time is printed next to it.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"
)

var (
	chaosSeedFlag = flag.Int64("chaos.seed", 0, "TestChaos fault schedule seed (0: OUTBOX_RELAY_CHAOS_SEED or the fixed default)")
	chaosLongFlag = flag.Bool("chaos.long", false, "TestChaos long mode (also OUTBOX_RELAY_CHAOS_LONG=1): 20+ kill -9 and more faults, a few minutes")
	chaosEOSFlag  = flag.Bool("chaos.exactly-once", false, "TestChaos with the relay's --delivery exactly-once (also OUTBOX_RELAY_CHAOS_DELIVERY=exactly-once): "+
		"read_committed consumers, 0 duplicates required, and the faults of that mode (a frozen leader, a PostgreSQL crash, the transaction coordinator's kill on a cluster)")
	chaosOnlyFlag = flag.String("chaos.only", "", "TestChaos runs only these fault kinds of its plan (comma-separated, e.g. leader-pg-cut,leader-kafka-cut; make chaos CHAOS_ONLY=...): "+
		"a developer's narrowing, with the plan's counts and the seed's timings")
)

// onlyKinds keeps the counts of the kinds named in only (all when empty).
func onlyKinds(counts map[faultKind]int, only string) map[faultKind]int {
	if only == "" {
		return counts
	}
	out := map[faultKind]int{}
	for _, k := range strings.Split(only, ",") {
		if n, ok := counts[faultKind(strings.TrimSpace(k))]; ok {
			out[faultKind(strings.TrimSpace(k))] = n
		}
	}
	return out
}

const chaosDefaultSeed = 20251202

func chaosSeed() int64 {
	if *chaosSeedFlag != 0 {
		return *chaosSeedFlag
	}
	if s := os.Getenv("OUTBOX_RELAY_CHAOS_SEED"); s != "" {
		if v, err := strconv.ParseInt(s, 10, 64); err == nil && v != 0 {
			return v
		}
	}
	return chaosDefaultSeed
}

func chaosLong() bool {
	return *chaosLongFlag || os.Getenv("OUTBOX_RELAY_CHAOS_LONG") == "1"
}

func chaosExactlyOnce() bool {
	return *chaosEOSFlag || os.Getenv("OUTBOX_RELAY_CHAOS_DELIVERY") == "exactly-once"
}

type faultKind string

const (
	faultKill9          faultKind = "kill-9"
	faultKill9Twice     faultKind = "kill-9x2" // kill, restart, kill again while it catches up
	faultKafkaStop      faultKind = "kafka-stop"
	faultPGRestart      faultKind = "pg-restart"
	faultPGCut          faultKind = "pg-cut"
	faultKafkaCut       faultKind = "kafka-cut"
	faultPGBlackhole    faultKind = "pg-blackhole"
	faultKafkaBlackhole faultKind = "kafka-blackhole"
	// faultLeaderKill starts a standby, quarantines a second aggregate
	// while it stands by, then kills the leader with kill -9: the standby
	// takes over and must park that aggregate's new events. Always last in
	// the schedule.
	faultLeaderKill faultKind = "kill-leader-quarantined"
	// The broker faults of a replicated cluster, in place of the Kafka
	// faults above when the chaos runs against scripts/kafkacluster.sh's
	// three nodes (make chaos CHAOS_KAFKA=cluster, make cluster-test):
	// kill -9 of a node, its controlled shutdown (SIGTERM), its freeze
	// (SIGSTOP past the produce timeout), each restored after Hold.
	faultBrokerKill  faultKind = "broker-kill-9"
	faultBrokerStop  faultKind = "broker-stop"
	faultBrokerPause faultKind = "broker-pause"
	// The faults of an exactly-once run (-chaos.exactly-once): a
	// PostgreSQL crash (immediate stop, so the slot's confirmed position
	// may move back), a leader frozen (SIGSTOP) until a standby took
	// over and then thawed as a zombie, and, on a cluster, kill -9 of the
	// node that coordinates the relay's transactions.
	faultPGCrash         faultKind = "pg-crash"
	faultFreezeLeader    faultKind = "freeze-leader"
	faultCoordinatorKill faultKind = "coordinator-kill-9"
	// Network cuts of the leader alone, with a standby beside it, as
	// across a partition that drops packets (a blackhole: nothing passes,
	// nothing is reset). Cut off PostgreSQL, the standby must lead within
	// --leader-timeout + 2 s (it ends the former leader's walsender);
	// cut off Kafka, the lock holds and there is no takeover. Drawn
	// after the others, so adding them left their schedule as it was.
	faultLeaderPGCut    faultKind = "leader-pg-cut"
	faultLeaderKafkaCut faultKind = "leader-kafka-cut"
)

// fault is one step of the schedule: Gap of steady load, then the fault.
type fault struct {
	Kind  faultKind
	Gap   time.Duration // steady load before the fault starts
	Hold  time.Duration // outage length; for kills: extra downtime after the slot went inactive
	Hold2 time.Duration // kill-9x2: run time of the restarted relay before the second kill
	Node  int           // broker faults: the node (1..3)

	// results
	Start, End  time.Time
	Recovery    time.Duration // End -> confirmed_flush_lsn past the LSN captured at End
	Recovered   bool
	CanaryAfter time.Duration // End -> canary event seen by the consumer
	CanaryOK    bool
	Note        string
}

// chaosConfig is the shape of a run.
type chaosConfig struct {
	Writers        int
	Aggregates     int
	TxInterval     time.Duration // per writer
	MaxTxEvents    int           // events per transaction: 1..MaxTxEvents
	Warmup         time.Duration
	RecoveryBound  time.Duration
	DrainBound     time.Duration
	Counts         map[faultKind]int
	GapMin, GapMax time.Duration
}

// chaosPlan is the run's shape; on a cluster (the brokers are three
// nodes of scripts/kafkacluster.sh) the broker faults replace the
// single broker's stop, cut and blackhole, which need the stack's broker
// and its proxied listener.
func chaosPlan(long, cluster, eos bool) chaosConfig {
	c := chaosStackPlan(long)
	if eos {
		c.Counts[faultPGCrash], c.Counts[faultFreezeLeader] = 1, 1
		if long {
			c.Counts[faultPGCrash], c.Counts[faultFreezeLeader] = 3, 3
		}
		if cluster {
			c.Counts[faultCoordinatorKill] = c.Counts[faultFreezeLeader]
		}
	}
	if cluster {
		for _, k := range []faultKind{faultKafkaStop, faultKafkaCut, faultKafkaBlackhole, faultLeaderKafkaCut} {
			delete(c.Counts, k)
		}
		c.Counts[faultBrokerKill], c.Counts[faultBrokerStop], c.Counts[faultBrokerPause] = 2, 1, 1
		if long {
			c.Counts[faultBrokerKill], c.Counts[faultBrokerStop], c.Counts[faultBrokerPause] = 6, 3, 3
		}
	}
	return c
}

func chaosStackPlan(long bool) chaosConfig {
	c := chaosConfig{
		Writers: 3, Aggregates: 200, TxInterval: 25 * time.Millisecond, MaxTxEvents: 6, // ~3 x 40 tx/s x 3.5 = ~420 events/s
		Warmup: 4 * time.Second, RecoveryBound: 30 * time.Second, DrainBound: 60 * time.Second,
		GapMin: 1500 * time.Millisecond, GapMax: 4 * time.Second,
		Counts: map[faultKind]int{faultKill9: 4, faultKafkaStop: 1, faultPGRestart: 1, faultPGCut: 1, faultKafkaCut: 1, faultLeaderKill: 1},
	}
	if long {
		c.RecoveryBound, c.DrainBound = 60*time.Second, 120*time.Second
		c.GapMax = 6 * time.Second
		c.Counts = map[faultKind]int{
			faultKill9: 16, faultKill9Twice: 3, // 22 kills
			faultKafkaStop: 3, faultPGRestart: 3, faultPGCut: 3, faultKafkaCut: 3,
			faultPGBlackhole: 2, faultKafkaBlackhole: 2, faultLeaderKill: 1,
			faultLeaderPGCut: 1, faultLeaderKafkaCut: 1,
		}
	}
	return c
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int63n(int64(hi-lo)))
}

// chaosSchedule draws the fault order and timings from seed.
func chaosSchedule(seed int64, cfg chaosConfig) []*fault {
	rng := rand.New(rand.NewSource(seed))
	kinds := make([]faultKind, 0, 64)
	for _, k := range []faultKind{faultKill9, faultKill9Twice, faultKafkaStop, faultPGRestart, faultPGCut, faultKafkaCut, faultPGBlackhole, faultKafkaBlackhole,
		faultBrokerKill, faultBrokerStop, faultBrokerPause, faultPGCrash, faultFreezeLeader, faultCoordinatorKill} {
		for i := 0; i < cfg.Counts[k]; i++ {
			kinds = append(kinds, k)
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	out := make([]*fault, len(kinds))
	for i, k := range kinds {
		f := &fault{Kind: k, Gap: uniform(rng, cfg.GapMin, cfg.GapMax)}
		switch k {
		case faultKill9:
			f.Hold = uniform(rng, 0, 1500*time.Millisecond)
		case faultKill9Twice:
			f.Hold = uniform(rng, 0, 500*time.Millisecond)
			f.Hold2 = uniform(rng, 300*time.Millisecond, 2500*time.Millisecond)
		case faultKafkaStop:
			f.Hold = uniform(rng, 2*time.Second, 4*time.Second)
		case faultPGRestart:
			// pg-restart is stop -m fast + start: the hold is the outage itself
		case faultPGCut, faultKafkaCut:
			f.Hold = uniform(rng, 2*time.Second, 5*time.Second)
		case faultPGBlackhole, faultKafkaBlackhole:
			f.Hold = uniform(rng, 3*time.Second, 6*time.Second)
		case faultBrokerKill, faultBrokerStop:
			f.Hold, f.Node = uniform(rng, time.Second, 5*time.Second), 1+rng.Intn(3)
		case faultBrokerPause:
			f.Hold, f.Node = uniform(rng, 3*time.Second, 14*time.Second), 1+rng.Intn(3)
		case faultCoordinatorKill:
			f.Hold = uniform(rng, time.Second, 5*time.Second) // the node: whichever coordinates at the time
		}
		out[i] = f
	}
	// Drawn after the others, so adding it left their schedule as it was.
	for i := 0; i < cfg.Counts[faultLeaderKill]; i++ {
		out = append(out, &fault{Kind: faultLeaderKill, Gap: uniform(rng, cfg.GapMin, cfg.GapMax)})
	}
	// The leader's cuts, drawn after that, and placed before it (it stays
	// last). The PostgreSQL cut outlasts --leader-timeout, so the
	// takeover happens while it lasts.
	var cuts []*fault
	for _, k := range []faultKind{faultLeaderPGCut, faultLeaderKafkaCut} {
		for i := 0; i < cfg.Counts[k]; i++ {
			f := &fault{Kind: k, Gap: uniform(rng, cfg.GapMin, cfg.GapMax)}
			if k == faultLeaderPGCut {
				f.Hold = uniform(rng, 14*time.Second, 18*time.Second)
			} else {
				f.Hold = uniform(rng, 5*time.Second, 10*time.Second)
			}
			cuts = append(cuts, f)
		}
	}
	if len(cuts) > 0 {
		last := len(out) - cfg.Counts[faultLeaderKill]
		out = append(out[:last], append(cuts, out[last:]...)...)
	}
	return out
}

// writeStats counts what the writers went through.
type writeStats struct {
	tx         atomic.Int64 // committed transactions
	failed     atomic.Int64 // attempts that failed before COMMIT (retried)
	ambiguous  atomic.Int64 // COMMIT returned an error: outcome checked in the table
	ambCommit  atomic.Int64 // ... and the rows were there (committed)
	ambAbsent  atomic.Int64 // ... and they were not (retried)
	unresolved atomic.Int64 // gave up (writer stopping, database unreachable)
	partial    atomic.Int64 // a transaction found partially present (must never happen)
}

func (s *writeStats) String() string {
	return fmt.Sprintf("tx=%d failed_attempts=%d ambiguous_commits=%d (committed %d, absent %d) unresolved=%d partial=%d",
		s.tx.Load(), s.failed.Load(), s.ambiguous.Load(), s.ambCommit.Load(), s.ambAbsent.Load(), s.unresolved.Load(), s.partial.Load())
}

type chaos struct {
	t          *testing.T
	cfg        chaosConfig
	env        *Env
	pgProxy    *Proxy
	kafkaProxy *Proxy
	relayEnv   []string
	relay      *Relay
	relays     int
	consumer   *Consumer
	ledger     *Ledger
	canary     *Writer
	stats      writeStats
	t0         time.Time

	kafkaDown atomic.Bool
	pgDown    atomic.Bool
	// cluster drives the brokers' nodes when the run is against a
	// cluster (nil against the stack's broker); nodeDown is the node a
	// broker fault has down or frozen (0: none), for restoreAll.
	cluster    *KafkaCluster
	nodeDown   atomic.Int32
	nodePaused atomic.Bool

	exitsMu sync.Mutex
	exits   []string // unexpected relay exits

	stackMu      sync.Mutex
	stackChanges []stackChange // PostgreSQL/Kafka process changes seen by watchStack

	poisonMu sync.Mutex
	poison   *Event // the committed poison event (dead-letter part), nil before
	// leaderPoison is the poison of chaosLeaderPoisonAgg, committed while a
	// standby waits (faultLeaderKill); nil before.
	leaderPoison       *Event
	injectLeaderPoison chan struct{}
	// quarantined is the number of committed events held back by the poison.
	quarantined int
}

const chaosPoisonAgg = "poison-agg"

// chaosLeaderPoisonAgg is the aggregate faultLeaderKill quarantines.
const chaosLeaderPoisonAgg = "poison-agg-leader"

// insertPoison inserts ev with headers that are not an object of strings:
// a poison event per docs/design.md.
func insertPoison(ctx context.Context, tx *Tx, table string, ev Event) error {
	_, err := tx.Exec(ctx, `insert into `+table+` (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers)
		values ($1::uuid, $2, $3, $4, $5, $6, $7::jsonb, '{"bad": 1}'::jsonb)`,
		ev.ID, ev.AggregateType, ev.AggregateID, ev.Version, ev.EventType, ev.SchemaVersion,
		fmt.Sprintf(`{"aggregate_id": %q, "version": %d, "note": "poison"}`, ev.AggregateID, ev.Version))
	return err
}

// poisonWriter keeps aggregate chaosPoisonAgg busy (one event per 20 ms) and,
// once inject is closed, commits one poison event for it in the middle of
// that stream.
func (c *chaos) poisonWriter(ctx context.Context, stop *atomic.Bool, inject <-chan struct{}, agg string, poison **Event) {
	w := c.env.NewWriter(c.ledger)
	injected := false
	for !stop.Load() && ctx.Err() == nil {
		start := time.Now()
		evs := w.NextEvents([]string{agg})
		var insert func(ctx context.Context, tx *Tx) error
		if !injected {
			select {
			case <-inject:
				injected = true
				ev := evs[0]
				insert = func(ctx context.Context, tx *Tx) error { return insertPoison(ctx, tx, w.Table, ev) }
			default:
			}
		}
		if !c.commitWith(ctx, w, evs, insert) {
			return
		}
		if insert != nil {
			c.poisonMu.Lock()
			ev := evs[0]
			*poison = &ev
			c.poisonMu.Unlock()
			c.logf("poison event %s committed: aggregate %s version %d, headers {\"bad\": 1}", ev.ID, ev.AggregateID, ev.Version)
		}
		if d := 20*time.Millisecond - time.Since(start); d > 0 {
			// wall-clock: paces the poison writer (one event per 20 ms)
			time.Sleep(d)
		}
	}
}

func (c *chaos) poisonEvent() *Event {
	c.poisonMu.Lock()
	defer c.poisonMu.Unlock()
	return c.poison
}

func (c *chaos) leaderPoisonEvent() *Event {
	c.poisonMu.Lock()
	defer c.poisonMu.Unlock()
	return c.leaderPoison
}

// killQuarantinedLeader is faultLeaderKill: a standby starts and waits;
// then, the first time, chaosLeaderPoisonAgg gets its poison and the slot
// is confirmed past it, so the standby can learn of the quarantine only
// from the dead-letter table; then the leader is killed with kill -9 and
// the standby becomes c.relay.
func (c *chaos) killQuarantinedLeader(f *fault) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(c.t))
	c.relays++
	standby := c.env.StartRelay(append(append([]string(nil), c.relayEnv...), "OUTBOX_RELAY_METRICS_ADDR="+addr)...)
	node := &relayNode{name: "standby", r: standby, addr: addr}
	if !within(30*time.Second, 100*time.Millisecond, node.readyStandby) {
		f.Note = "standby not ready within 30s"
		c.logf("WARNING: %s", f.Note)
	}
	if c.injectLeaderPoison != nil {
		close(c.injectLeaderPoison)
		c.injectLeaderPoison = nil
		var lsn string
		if !within(20*time.Second, 50*time.Millisecond, func() bool {
			if c.leaderPoisonEvent() == nil {
				return false
			}
			var err error
			lsn, err = c.insertLSN(5 * time.Second)
			return err == nil
		}) {
			f.Note = strings.TrimPrefix(f.Note+"; leader poison not committed", "; ")
		}
		// Past the poison, the new leader never sees it in the stream.
		if lsn != "" && !within(c.cfg.RecoveryBound, 100*time.Millisecond, func() bool { return c.confirmedAtLeast(lsn) }) {
			f.Note = strings.TrimPrefix(f.Note+"; slot not confirmed past the leader poison", "; ")
		}
		time.Sleep(500 * time.Millisecond) // wall-clock: load flows, so a few events are parked by the old leader
	}
	c.relay.Kill9()
	c.relay = standby
	if !within(30*time.Second, 100*time.Millisecond, node.streamingLeader) {
		f.Note = strings.TrimPrefix(f.Note+"; standby not streaming 30s after the kill", "; ")
		c.logf("WARNING: %s", f.Note)
		return
	}
	f.Note = strings.TrimPrefix(f.Note+fmt.Sprintf("; standby leads %s after kill -9", time.Since(f.Start).Round(time.Millisecond)), "; ")
}

// freezeLeader starts a standby, freezes the leader (SIGSTOP) until the
// standby leads and streams, then thaws it: the zombie's next
// transactional request meets the standby's epoch (its producer was
// fenced by the standby's InitProducerId), it steps down, and is then
// stopped (the standby is the leader from here on).
func (c *chaos) freezeLeader(f *fault) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(c.t))
	c.relays++
	standby := c.env.StartRelay(append(append([]string(nil), c.relayEnv...), "OUTBOX_RELAY_METRICS_ADDR="+addr)...)
	node := &relayNode{name: "standby", r: standby, addr: addr}
	if !within(30*time.Second, 100*time.Millisecond, node.readyStandby) {
		f.Note = "standby not ready within 30s"
		c.logf("WARNING: %s", f.Note)
	}
	zombie := c.relay
	if err := syscall.Kill(zombie.Pid(), syscall.SIGSTOP); err != nil {
		c.t.Fatalf("SIGSTOP: %v", err)
	}
	took := within(60*time.Second, 100*time.Millisecond, node.streamingLeader)
	if err := syscall.Kill(zombie.Pid(), syscall.SIGCONT); err != nil {
		c.t.Fatalf("SIGCONT: %v", err)
	}
	c.relay = standby
	if !took {
		f.Note = strings.TrimPrefix(f.Note+"; standby not streaming 60s after the freeze", "; ")
		c.logf("WARNING: %s", f.Note)
	} else {
		f.Note = strings.TrimPrefix(f.Note+fmt.Sprintf("; standby leads %s after the freeze", time.Since(f.Start).Round(time.Millisecond)), "; ")
	}
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return zombie.LogContains("standby again") || !zombie.Running() }) {
		f.Note += "; the thawed leader did not step down within 30s"
		c.logf("WARNING: the thawed leader did not step down within 30s:\n%s", zombie.LogTail(20))
	}
	zombie.Term(20 * time.Second)
}

// chaosLeaderTimeout is the relays' --leader-timeout in this run.
func (c *chaos) chaosLeaderTimeout() time.Duration {
	for _, e := range c.relayEnv {
		if v, ok := strings.CutPrefix(e, "OUTBOX_RELAY_LEADER_TIMEOUT="); ok {
			if d, err := time.ParseDuration(v); err == nil {
				return d
			}
		}
	}
	return 10 * time.Second // the default
}

// startStandby starts a relay beside the leader, with extra over the run's
// environment, and waits until it is a ready standby.
func (c *chaos) startStandby(f *fault, extra ...string) (*relayNode, []string) {
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(c.t))
	c.relays++
	env := append(append([]string(nil), c.relayEnv...), extra...)
	standby := c.env.StartRelay(append(append([]string(nil), env...), "OUTBOX_RELAY_METRICS_ADDR="+addr)...)
	node := &relayNode{name: "standby", r: standby, addr: addr}
	if !within(30*time.Second, 100*time.Millisecond, node.readyStandby) {
		f.Note = "standby not ready within 30s"
		c.logf("WARNING: %s", f.Note)
	}
	return node, env
}

// cutLeaderOffPostgres is faultLeaderPGCut: a standby with a PostgreSQL
// proxy of its own starts; the leader's proxy is blackholed for Hold; the
// standby must stream within --leader-timeout + 2 s. It becomes c.relay,
// and its proxy the run's PostgreSQL proxy; the former leader, standby
// again after the heal, is stopped.
func (c *chaos) cutLeaderOffPostgres(f *fault) {
	proxy, url := StartPGProxy(c.t)
	node, env := c.startStandby(f, "OUTBOX_RELAY_DATABASE_URL="+url)
	former, formerProxy := c.relay, c.pgProxy
	cut := time.Now()
	formerProxy.Blackhole(f.Hold + 30*time.Second)
	bound := c.chaosLeaderTimeout() + 2*time.Second
	led := within(f.Hold, 20*time.Millisecond, node.streamingLeader)
	took := time.Since(cut)
	c.relay, c.pgProxy, c.relayEnv = node.r, proxy, env
	switch {
	case !led:
		f.Note = strings.TrimPrefix(f.Note+fmt.Sprintf("; standby not streaming %s after the cut", f.Hold), "; ")
		c.t.Errorf("leader-pg-cut: the standby did not lead within %s of the cut (bound %s):\n%s", f.Hold, bound, node.r.LogTail(20))
	case took > bound:
		f.Note = strings.TrimPrefix(f.Note+fmt.Sprintf("; standby leads %s after the cut, over %s", took.Round(time.Millisecond), bound), "; ")
		c.t.Errorf("leader-pg-cut: the standby led %s after the cut, over --leader-timeout + 2s (%s)", took.Round(time.Millisecond), bound)
	default:
		f.Note = strings.TrimPrefix(f.Note+fmt.Sprintf("; standby leads %s after the cut", took.Round(time.Millisecond)), "; ")
	}
	// wall-clock: the rest of the cut's hold, under load
	time.Sleep(time.Until(cut.Add(f.Hold)))
	formerProxy.Restore()
	former.Term(20 * time.Second)
}

// cutLeaderOffKafka is faultLeaderKafkaCut: a standby starts; the Kafka
// proxy is blackholed for Hold (the standby, which writes nothing, does not
// notice); the lock must hold, with no takeover. The standby is stopped
// after the heal.
func (c *chaos) cutLeaderOffKafka(f *fault) {
	node, _ := c.startStandby(f)
	logged := len(c.relay.Log()) // the leader's log so far: earlier faults may have moved its lock
	c.kafkaProxy.Blackhole(f.Hold + 5*time.Second)
	// wall-clock: the fault's hold time (the Kafka cut's length)
	time.Sleep(f.Hold)
	c.kafkaProxy.Restore()
	if node.r.LogContains("lock acquired") || strings.Contains(c.relay.Log()[logged:], "leadership lost") {
		f.Note = strings.TrimPrefix(f.Note+"; leadership moved", "; ")
		c.t.Errorf("leader-kafka-cut: leadership moved during a Kafka cut:\nleader:\n%s\nstandby:\n%s", c.relay.LogTail(20), node.r.LogTail(20))
	} else {
		f.Note = strings.TrimPrefix(f.Note+"; no takeover", "; ")
	}
	node.r.Term(20 * time.Second)
}

// splitPoisoned moves the poison event and every later event of its
// aggregate from expected to the returned list, in aggregate_version order.
func splitPoisoned(expected map[string]Event, poison Event) []Event {
	var out []Event
	for id, ev := range expected {
		if ev.AggregateType == poison.AggregateType && ev.AggregateID == poison.AggregateID && ev.Version >= poison.Version {
			out = append(out, ev)
			delete(expected, id)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// deadLetterRow is a row of outbox_dead_letter.
type deadLetterRow struct {
	ID, Status, LSN string
	Version         int64
	Ordinal         int
}

// deadLetterRows reads the dead-letter rows of ids, in (tx_lsn, tx_ordinal) order.
func deadLetterRows(ctx context.Context, db *DB, ids []string) ([]deadLetterRow, error) {
	var rows []deadLetterRow
	err := db.WithConn(ctx, func(conn *pgx.Conn) error {
		rs, err := conn.Query(ctx, `select event_id::text, status, coalesce(aggregate_version, -1), tx_lsn::text AS tx_lsn_text, tx_ordinal
			from public.outbox_dead_letter where event_id::text = any($1) order by tx_lsn, tx_ordinal`, ids)
		if err != nil {
			return err
		}
		defer rs.Close()
		for rs.Next() {
			var r deadLetterRow
			if err := rs.Scan(&r.ID, &r.Status, &r.Version, &r.LSN, &r.Ordinal); err != nil {
				return err
			}
			rows = append(rows, r)
		}
		return rs.Err()
	})
	return rows, err
}

// checkDeadLetter waits (bounded) until outbox_dead_letter holds a row for
// every event of want (the poison first, then the later events of its
// aggregate) and checks them: the poison "dead", the rest "parked", in
// aggregate_version order when sorted by commit position. It returns the
// problems found (none: nil) and the number of rows.
func checkDeadLetter(db *DB, want []Event, bound time.Duration) (problems []string, n int) {
	ids := make([]string, len(want))
	for i, e := range want {
		ids[i] = e.ID
	}
	var rows []deadLetterRow
	var err error
	within(bound, 250*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		rows, err = deadLetterRows(ctx, db, ids)
		return err == nil && len(rows) >= len(want)
	})
	if err != nil {
		return []string{"query outbox_dead_letter: " + err.Error()}, len(rows)
	}
	if len(rows) != len(want) {
		problems = append(problems, fmt.Sprintf("outbox_dead_letter has %d rows for the poison event and the %d later events of its aggregate, want %d",
			len(rows), len(want)-1, len(want)))
	}
	for i := 0; i < len(rows) && i < len(want); i++ {
		wantStatus := "parked"
		if i == 0 {
			wantStatus = "dead"
		}
		if r := rows[i]; r.ID != want[i].ID || r.Version != want[i].Version || r.Status != wantStatus {
			problems = append(problems, fmt.Sprintf("dead-letter row %d (by tx_lsn, tx_ordinal): %s v%d status %q, want %s v%d status %q",
				i, r.ID, r.Version, r.Status, want[i].ID, want[i].Version, wantStatus))
			if len(problems) > 10 {
				break
			}
		}
	}
	return problems, len(rows)
}

// dropDeadLetter removes the rows of evs (the table is shared by every test table).
func dropDeadLetter(t testing.TB, db *DB, evs func() []Event) {
	t.Cleanup(func() {
		list := evs()
		if len(list) == 0 {
			return
		}
		ids := make([]string, len(list))
		for i, e := range list {
			ids[i] = e.ID
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := db.Exec(ctx, `delete from public.outbox_dead_letter where event_id = any($1)`, ids); err != nil {
			t.Logf("cleanup: dead-letter rows: %v", err)
		}
	})
}

// stackChange is a PostgreSQL or Kafka process coming or going. The stack is
// shared: other tests (TestBrokerOutage, other checkouts' scripts) may stop it
// too, and a recovery that overlaps such a change is not the relay's fault.
type stackChange struct {
	At       time.Time
	What     string // "kafka" or "postgres"
	From, To string // pid or "down"
}

func stackPID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "down"
	}
	line, _, _ := strings.Cut(string(b), "\n")
	if line = strings.TrimSpace(line); line == "" {
		return "down"
	}
	if _, err := os.Stat("/proc/" + line); err != nil {
		return "down"
	}
	return line
}

// watchStack samples the broker's and the postmaster's pid until ctx ends.
func (c *chaos) watchStack(ctx context.Context) {
	files := map[string]string{
		"kafka":    repoRoot + "/.stack/kafka/kafka.pid",
		"postgres": repoRoot + "/.stack/pg/data/postmaster.pid",
	}
	last := map[string]string{}
	for k, f := range files {
		last[k] = stackPID(f)
	}
	tk := time.NewTicker(250 * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		for k, f := range files {
			if now := stackPID(f); now != last[k] {
				c.stackMu.Lock()
				c.stackChanges = append(c.stackChanges, stackChange{At: time.Now(), What: k, From: last[k], To: now})
				c.stackMu.Unlock()
				last[k] = now
			}
		}
	}
}

// external returns the stack changes in [from, to] that no fault of ours
// explains (our kafka-stop and pg-restart windows, with a little slack).
func (c *chaos) external(schedule []*fault, from, to time.Time) []stackChange {
	c.stackMu.Lock()
	defer c.stackMu.Unlock()
	var out []stackChange
	for _, ch := range c.stackChanges {
		if ch.At.Before(from) || ch.At.After(to) {
			continue
		}
		ours := false
		for _, f := range schedule {
			own := (f.Kind == faultKafkaStop && ch.What == "kafka") || ((f.Kind == faultPGRestart || f.Kind == faultPGCrash) && ch.What == "postgres")
			if own && !f.Start.IsZero() && !ch.At.Before(f.Start.Add(-time.Second)) && !ch.At.After(f.End.Add(time.Second)) {
				ours = true
				break
			}
		}
		if !ours {
			out = append(out, ch)
		}
	}
	return out
}

func (c *chaos) since() string { return time.Since(c.t0).Round(100 * time.Millisecond).String() }

func (c *chaos) logf(format string, args ...any) {
	c.t.Helper()
	c.t.Logf("[chaos +%s] %s", c.since(), fmt.Sprintf(format, args...))
}

func (c *chaos) startRelay() {
	c.relays++
	c.relay = c.env.StartRelay(c.relayEnv...)
}

// checkRelay restarts the relay if it exited by itself (a finding: it must
// survive every fault here) and records the exit with its last log lines.
func (c *chaos) checkRelay(where string) {
	c.t.Helper()
	if c.relay.Running() {
		return
	}
	code := c.relay.exitCode // set before done is closed
	var last []string
	for _, l := range strings.Split(c.relay.LogTail(200), "\n") {
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"fatal"`) || strings.Contains(l, "panic") {
			last = append(last, l)
		}
	}
	msg := fmt.Sprintf("relay pid %d exited by itself with code %d (%s); log %s; error lines: %s",
		c.relay.Pid(), code, where, c.relay.logPath, strings.Join(firstN(last, 5), " | "))
	c.exitsMu.Lock()
	c.exits = append(c.exits, msg)
	c.exitsMu.Unlock()
	c.logf("UNEXPECTED: %s", msg)
	c.startRelay()
}

// query runs f with a short timeout, tolerating errors (PostgreSQL may be
// restarting); it retries until bound passes.
func (c *chaos) query(bound time.Duration, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(bound)
	var err error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = f(ctx)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		// wall-clock: retry interval of a query with a deadline
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *chaos) insertLSN(bound time.Duration) (string, error) {
	var lsn string
	err := c.query(bound, func(ctx context.Context) error {
		return c.env.DB.QueryRow(ctx, `select pg_current_wal_insert_lsn()::text`).Scan(&lsn)
	})
	return lsn, err
}

// confirmedAtLeast is Env.ConfirmedAtLeast without failing on query errors.
func (c *chaos) confirmedAtLeast(lsn string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var ok *bool
	err := c.env.DB.QueryRow(ctx, `select confirmed_flush_lsn >= $1::pg_lsn from pg_replication_slots where slot_name = $2`, lsn, c.env.Slot).Scan(&ok)
	return err == nil && ok != nil && *ok
}

func (c *chaos) slotActive() (active bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := Slot(ctx, c.env.DB, c.env.Slot)
	return s.Active, err
}

// commit inserts evs in one transaction, retrying until it committed (true)
// or ctx ends (false). Only events whose COMMIT succeeded - or, when COMMIT
// failed ambiguously, whose rows are in the table afterwards - are recorded.
func (c *chaos) commit(ctx context.Context, w *Writer, evs []Event) bool {
	return c.commitWith(ctx, w, evs, nil)
}

// commitWith is commit with a custom insert (nil: insertEvents).
func (c *chaos) commitWith(ctx context.Context, w *Writer, evs []Event, insert func(ctx context.Context, tx *Tx) error) bool {
	if insert == nil {
		insert = func(ctx context.Context, tx *Tx) error { return insertEvents(ctx, tx, w.Table, evs) }
	}
	ids := make([]string, len(evs))
	for i, e := range evs {
		ids[i] = e.ID
	}
	backoff := 50 * time.Millisecond
	sleep := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
		return true
	}
	for {
		if ctx.Err() != nil {
			c.stats.unresolved.Add(1)
			return false
		}
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		ambiguous, err := c.tryInsert(actx, insert)
		cancel()
		if err == nil {
			now := time.Now()
			for i := range evs {
				evs[i].CommitTime = now
			}
			w.Ledger.addCommitted(evs, "")
			c.stats.tx.Add(1)
			return true
		}
		if !ambiguous {
			c.stats.failed.Add(1)
			if !sleep() {
				c.stats.unresolved.Add(1)
				return false
			}
			continue
		}
		// COMMIT (or a retry hitting the primary key) failed: did the rows land?
		c.stats.ambiguous.Add(1)
		var n int
		rerr := c.query(2*time.Minute, func(qctx context.Context) error {
			return c.env.DB.QueryRow(qctx, `select count(*) from `+w.Table+` where event_id = any($1::uuid[])`, ids).Scan(&n)
		})
		switch {
		case rerr != nil:
			c.stats.unresolved.Add(1)
			return false
		case n == len(evs):
			c.stats.ambCommit.Add(1)
			// The commit time is unknown (somewhere before now): no timestamp check.
			w.Ledger.addCommitted(evs, "")
			c.stats.tx.Add(1)
			return true
		case n == 0:
			c.stats.ambAbsent.Add(1)
			if !sleep() {
				c.stats.unresolved.Add(1)
				return false
			}
		default:
			c.stats.partial.Add(1)
			c.stats.unresolved.Add(1)
			return false
		}
	}
}

// tryInsert runs one attempt. ambiguous reports that the outcome is unknown:
// COMMIT itself failed, or the insert hit an existing event_id (an earlier
// ambiguous attempt did commit).
func (c *chaos) tryInsert(ctx context.Context, insert func(ctx context.Context, tx *Tx) error) (ambiguous bool, err error) {
	tx, err := c.env.DB.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if err := insert(ctx, tx); err != nil {
		var pe *pgconn.PgError
		return errors.As(err, &pe) && pe.Code == "23505", err
	}
	if err := tx.Commit(ctx); err != nil {
		return true, err
	}
	return false, nil
}

// writer commits transactions of 1..MaxTxEvents events over its own
// aggregates (so versions increase in commit order) until stop.
func (c *chaos) writer(ctx context.Context, stop *atomic.Bool, own []string, seed int64) {
	w := c.env.NewWriter(c.ledger)
	rng := rand.New(rand.NewSource(seed))
	for !stop.Load() && ctx.Err() == nil {
		start := time.Now()
		ids := make([]string, 1+rng.Intn(c.cfg.MaxTxEvents))
		for i := range ids {
			ids[i] = own[rng.Intn(len(own))]
		}
		if !c.commit(ctx, w, w.NextEvents(ids)) {
			return
		}
		if d := c.cfg.TxInterval - time.Since(start); d > 0 {
			// wall-clock: paces the load writer (a transaction per TxInterval)
			time.Sleep(d)
		}
	}
}

// restoreAll undoes any fault still in place (idempotent; safe after a failure).
func (c *chaos) restoreAll() {
	if c.pgProxy != nil && c.pgProxy.Mode() != ProxyPass {
		c.pgProxy.Restore()
	}
	if c.kafkaProxy != nil && c.kafkaProxy.Mode() != ProxyPass {
		c.kafkaProxy.Restore()
	}
	if c.kafkaDown.Load() {
		StackCtl(c.t, "kafka-start")
		c.kafkaDown.Store(false)
	}
	if c.pgDown.Load() {
		StackCtl(c.t, "pg-start")
		c.pgDown.Store(false)
	}
	if n := int(c.nodeDown.Swap(0)); n != 0 {
		if c.nodePaused.Load() {
			c.cluster.Resume(n)
		} else {
			c.cluster.Start(n)
		}
	}
}

// brokerFault takes node f.Node down (kill -9 or SIGTERM) or freezes it
// for f.Hold, then brings it back; Start waits until it has registered.
func (c *chaos) brokerFault(f *fault) {
	n := f.Node
	c.nodePaused.Store(f.Kind == faultBrokerPause)
	c.nodeDown.Store(int32(n))
	switch f.Kind {
	case faultBrokerKill:
		c.cluster.Kill(n)
	case faultBrokerStop:
		c.cluster.Stop(n)
	case faultBrokerPause:
		c.cluster.Pause(n)
	}
	// wall-clock: the broker fault's hold time (outage length)
	time.Sleep(f.Hold)
	if f.Kind == faultBrokerPause {
		c.cluster.Resume(n)
	} else {
		c.cluster.Start(n)
	}
	c.nodeDown.Store(0)
	f.Note = fmt.Sprintf("node %d", n)
}

// waitSlotInactive waits for the walsender of a killed relay to go away.
func (c *chaos) waitSlotInactive(bound time.Duration) bool {
	return within(bound, 50*time.Millisecond, func() bool {
		active, err := c.slotActive()
		return err == nil && !active
	})
}

func (c *chaos) kill9(f *fault) {
	c.relay.Kill9()
	t := time.Now()
	if !c.waitSlotInactive(30 * time.Second) {
		f.Note = "slot still active 30s after kill -9"
		c.logf("WARNING: %s", f.Note)
	} else {
		f.Note = fmt.Sprintf("slot inactive after %s", time.Since(t).Round(time.Millisecond))
	}
	// wall-clock: the fault's hold time (how long the relay stays down)
	time.Sleep(f.Hold)
	c.startRelay()
}

// run executes one fault and sets f.Start/f.End.
func (c *chaos) run(f *fault) {
	c.t.Helper()
	f.Start = time.Now()
	switch f.Kind {
	case faultKill9:
		c.kill9(f)
	case faultLeaderKill:
		c.killQuarantinedLeader(f)
	case faultKill9Twice:
		c.kill9(f)
		// wall-clock: the restarted relay runs under load a while before the second kill
		time.Sleep(f.Hold2)
		c.checkRelay("before second kill")
		note := f.Note
		c.kill9(f)
		f.Note = note + "; again: " + f.Note
	case faultKafkaStop:
		c.kafkaDown.Store(true)
		StackCtl(c.t, "kafka-stop")
		// wall-clock: the fault's hold time (Kafka outage length)
		time.Sleep(f.Hold)
		StackCtl(c.t, "kafka-start")
		c.kafkaDown.Store(false)
	case faultPGRestart:
		c.pgDown.Store(true)
		StackCtl(c.t, "pg-restart")
		c.pgDown.Store(false)
	case faultPGCut, faultKafkaCut:
		p := c.pgProxy
		if f.Kind == faultKafkaCut {
			p = c.kafkaProxy
		}
		n := p.Cut()
		// wall-clock: the fault's hold time (connections stay cut)
		time.Sleep(f.Hold)
		p.Restore()
		f.Note = fmt.Sprintf("%d connections cut", n)
	case faultPGBlackhole, faultKafkaBlackhole:
		p := c.pgProxy
		if f.Kind == faultKafkaBlackhole {
			p = c.kafkaProxy
		}
		p.Blackhole(f.Hold + 5*time.Second)
		// wall-clock: the fault's hold time (blackhole length)
		time.Sleep(f.Hold)
		p.Restore()
	case faultBrokerKill, faultBrokerStop, faultBrokerPause:
		c.brokerFault(f)
	case faultPGCrash:
		c.pgDown.Store(true)
		StackCtl(c.t, "pg-crash")
		c.pgDown.Store(false)
	case faultFreezeLeader:
		c.freezeLeader(f)
	case faultLeaderPGCut:
		c.cutLeaderOffPostgres(f)
	case faultLeaderKafkaCut:
		c.cutLeaderOffKafka(f)
	case faultCoordinatorKill:
		f.Node = transactionCoordinator(c.t, c.env.TransactionalID())
		c.nodeDown.Store(int32(f.Node))
		c.cluster.Kill(f.Node)
		// wall-clock: the fault's hold time (the coordinator's node stays down)
		time.Sleep(f.Hold)
		c.cluster.Start(f.Node)
		c.nodeDown.Store(0)
		f.Note = fmt.Sprintf("node %d coordinated the transactions", f.Node)
	}
	f.End = time.Now()
}

// recover commits a canary at the end of f and waits until the slot's
// confirmed_flush_lsn passes the LSN right after it (see the file comment).
func (c *chaos) recover(f *fault) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RecoveryBound)
	defer cancel()
	evs := c.canary.NextEvents([]string{"canary"})
	if !c.commit(ctx, c.canary, evs) {
		f.Note = strings.TrimPrefix(f.Note+"; canary commit failed", "; ")
		return
	}
	lsn, err := c.insertLSN(10 * time.Second)
	if err != nil {
		f.Note = strings.TrimPrefix(f.Note+"; no insert LSN: "+err.Error(), "; ")
		return
	}
	can := map[string]Event{evs[0].ID: evs[0]}
	deadline := f.End.Add(c.cfg.RecoveryBound)
	for time.Now().Before(deadline) {
		c.checkRelay("recovering from " + string(f.Kind))
		if !f.CanaryOK && c.consumer.Missing(can) == 0 {
			f.CanaryOK, f.CanaryAfter = true, time.Since(f.End)
		}
		if !f.Recovered && c.confirmedAtLeast(lsn) {
			f.Recovered, f.Recovery = true, time.Since(f.End)
		}
		if f.Recovered && f.CanaryOK {
			return
		}
		// wall-clock: poll interval of a wait on recovery and canary with a deadline
		time.Sleep(100 * time.Millisecond)
	}
}

func TestChaos(t *testing.T) {
	inSuites(t, exclusive, stack|cluster)
	long, seed, eos := chaosLong(), chaosSeed(), chaosExactlyOnce()
	cluster := clusterOrNil(t)
	cfg := chaosPlan(long, cluster != nil, eos)
	cfg.Counts = onlyKinds(cfg.Counts, *chaosOnlyFlag)
	schedule := chaosSchedule(seed, cfg)
	mode := "short"
	if long {
		mode = "long"
	}
	var plan []string
	for _, f := range schedule {
		s := fmt.Sprintf("%s(gap %s", f.Kind, f.Gap.Round(10*time.Millisecond))
		if f.Hold > 0 {
			s += fmt.Sprintf(", hold %s", f.Hold.Round(10*time.Millisecond))
		}
		if f.Hold2 > 0 {
			s += fmt.Sprintf(", rerun %s", f.Hold2.Round(10*time.Millisecond))
		}
		plan = append(plan, s+")")
	}
	kafkaKind := "single broker"
	if cluster != nil {
		kafkaKind = fmt.Sprintf("%d-node cluster", cluster.Nodes)
	}
	delivery := "at-least-once"
	if eos {
		delivery = "exactly-once"
	}
	header := fmt.Sprintf("TestChaos: mode=%s kafka=%s delivery=%s seed=%d (rerun: -args -chaos.seed=%d%s%s) faults=%d writers=%d aggregates=%d",
		mode, kafkaKind, delivery, seed, seed, map[bool]string{true: " -chaos.long", false: ""}[long], map[bool]string{true: " -chaos.exactly-once", false: ""}[eos],
		len(schedule), cfg.Writers, cfg.Aggregates)
	fmt.Println(header)
	t.Log(header)
	t.Logf("schedule: %s", strings.Join(plan, " "))

	dlq, dlqWhy := relaySupportsDLQ(t)
	env := NewEnv(t, EnvOptions{})
	c := &chaos{t: t, cfg: cfg, env: env, ledger: NewLedger(), t0: time.Now(), cluster: cluster}
	c.canary = env.NewWriter(c.ledger)
	c.canary.EventType = "Canary"
	pgProxy, pgURL := StartPGProxy(t)
	c.pgProxy = pgProxy
	brokers := strings.Join(kafkaBrokers, ",")
	if cluster == nil {
		c.kafkaProxy = StartKafkaProxy(t)
		brokers = c.kafkaProxy.Addr
	}
	c.relayEnv = []string{
		"OUTBOX_RELAY_DATABASE_URL=" + pgURL,
		"OUTBOX_RELAY_KAFKA_BROKERS=" + brokers,
		"OUTBOX_RELAY_LOG_LEVEL=info",
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT=10s",
	}
	if eos {
		// The default transaction interval (group commit), a positions
		// topic of the run's own, and the leader timings of
		// TestExactlyOnceFencing, so a standby takes a frozen leader's
		// place within seconds.
		c.relayEnv = append(c.relayEnv, "OUTBOX_RELAY_DELIVERY=exactly-once", "OUTBOX_RELAY_POSITIONS_TOPIC=it."+env.Sfx+".positions")
		c.relayEnv = append(c.relayEnv, "OUTBOX_RELAY_LEADER_POLL_INTERVAL=200ms", "OUTBOX_RELAY_LEADER_TIMEOUT=4s",
			"OUTBOX_RELAY_LEADER_KEEPALIVE_INTERVAL=500ms", "OUTBOX_RELAY_WAL_SENDER_TIMEOUT=5s")
	}
	// Safety nets: t.Cleanup for the stack (runs even if the test goroutine
	// died), defer for everything (runs before the cleanups stop the relays).
	t.Cleanup(func() {
		if c.kafkaDown.Load() {
			StackCtl(t, "kafka-start")
		}
		if c.pgDown.Load() {
			StackCtl(t, "pg-start")
		}
	})
	defer c.restoreAll()

	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	go c.watchStack(sctx)

	if eos {
		c.consumer = StartTxnConsumer(t, env.Topic, env.Partitions, true)
	} else {
		c.consumer = StartConsumer(t, env.Topic, env.Partitions)
	}
	c.startRelay()

	// Steady load.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := 0; w < cfg.Writers; w++ {
		var own []string
		for i := w; i < cfg.Aggregates; i += cfg.Writers {
			own = append(own, aggName(i))
		}
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c.writer(wctx, &stop, own, seed+int64(w)+1)
		}(w)
	}
	inject := make(chan struct{})
	injectAt := len(schedule) / 3 // the poison goes in after this many faults
	if dlq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.poisonWriter(wctx, &stop, inject, chaosPoisonAgg, &c.poison)
		}()
		if cfg.Counts[faultLeaderKill] > 0 {
			c.injectLeaderPoison = make(chan struct{})
			wg.Add(1)
			go func(inject <-chan struct{}) {
				defer wg.Done()
				c.poisonWriter(wctx, &stop, inject, chaosLeaderPoisonAgg, &c.leaderPoison)
			}(c.injectLeaderPoison)
		}
	} else {
		t.Logf("poison part skipped: the relay has no dead-letter support yet (`outbox-relay dlq --help`: %s)", dlqWhy)
	}
	stopWriters := func() {
		if stop.Swap(true) {
			return
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			c.logf("writers still busy 30s after stop: cancelling")
			wcancel()
			<-done
		}
	}
	defer stopWriters()

	// wall-clock: warm-up: load flows before the first fault
	time.Sleep(cfg.Warmup)
	c.checkRelay("warm-up")
	c.logf("warm-up done: committed=%d delivered=%d", c.ledger.CommittedCount(), c.consumer.Count())

	for i, f := range schedule {
		if i == injectAt {
			close(inject)
		}
		// wall-clock: the schedule's gap of steady load, so the fault lands mid-stream
		time.Sleep(f.Gap)
		c.checkRelay("before " + string(f.Kind))
		c.logf("fault %d/%d %s starts (committed=%d records=%d)", i+1, len(schedule), f.Kind, c.ledger.CommittedCount(), c.consumer.Count())
		c.run(f)
		c.recover(f)
		c.logf("fault %d/%d %s: took %s, recovered=%v in %s, canary=%v in %s %s", i+1, len(schedule), f.Kind,
			f.End.Sub(f.Start).Round(time.Millisecond), f.Recovered, f.Recovery.Round(time.Millisecond),
			f.CanaryOK, f.CanaryAfter.Round(time.Millisecond), f.Note)
	}
	// wall-clock: load flows on after the last fault before the writers stop
	time.Sleep(2 * time.Second)
	stopWriters()
	c.checkRelay("end of schedule")
	c.logf("writers stopped: %s", c.stats.String())

	// Ground truth: the table. The ledger must match it exactly.
	expected := ExpectedFromTable(t, env.DB, env.QuotedTable())
	ledger := c.ledger.Committed()
	var ledgerOnly, tableOnly []string
	for id, ev := range ledger {
		if _, ok := expected[id]; !ok {
			ledgerOnly = append(ledgerOnly, id)
		} else {
			expected[id] = ev // keeps CommitTime for the timestamp check
		}
	}
	for id := range expected {
		if _, ok := ledger[id]; !ok {
			tableOnly = append(tableOnly, id)
		}
	}
	var quarantined []Event
	forbidden := map[string]Event{}
	poison := c.poisonEvent()
	if poison != nil {
		quarantined = splitPoisoned(expected, *poison)
		c.quarantined = len(quarantined)
		for _, e := range quarantined {
			forbidden[e.ID] = e
		}
		dropDeadLetter(t, env.DB, func() []Event { return quarantined })
	}
	var leaderQuarantined []Event
	leaderPoison := c.leaderPoisonEvent()
	if leaderPoison != nil {
		leaderQuarantined = splitPoisoned(expected, *leaderPoison)
		for _, e := range leaderQuarantined {
			forbidden[e.ID] = e
		}
		dropDeadLetter(t, env.DB, func() []Event { return leaderQuarantined })
	}
	finalLSN, err := c.insertLSN(10 * time.Second)
	if err != nil {
		t.Fatalf("insert lsn: %v", err)
	}

	// Drain: bounded wait until every committed event is delivered and confirmed.
	drainStart := time.Now()
	delivered := c.consumer.WaitFor(expected, cfg.DrainBound, 0)
	deliveredIn := time.Since(drainStart)
	confirmed := within(cfg.DrainBound-time.Since(drainStart)+5*time.Second, 200*time.Millisecond, func() bool {
		c.checkRelay("drain")
		return c.confirmedAtLeast(finalLSN)
	})
	drained := time.Since(drainStart)

	// Invariants over a fresh read of every partition from the start:
	// read_committed in exactly-once mode, where a duplicate is a failure.
	var records []Record
	if eos {
		fresh := StartTxnConsumer(t, env.Topic, env.Partitions, true)
		if !fresh.WaitFor(expected, 60*time.Second, 2*time.Second) {
			t.Errorf("a fresh read_committed consumer did not get every committed event within 60s")
		}
		fresh.Stop()
		records = fresh.Records()
	} else {
		var err error
		if records, err = readTopic(env.Topic, env.Partitions, 60*time.Second); err != nil {
			t.Fatalf("final read of %s: %v", env.Topic, err)
		}
	}
	rep := CheckRecords(records, env.Partitions, expected, CheckOptions{TimestampSkew: 10 * time.Second, Forbidden: forbidden})
	var dlProblems []string
	poisonLine := "poison: skipped (no dead-letter support in the relay)"
	if dlq {
		if poison == nil {
			dlProblems = append(dlProblems, "the poison event was never committed")
			poisonLine = "poison: NOT committed"
		} else {
			var n int
			dlProblems, n = checkDeadLetter(env.DB, quarantined, 30*time.Second)
			poisonLine = fmt.Sprintf("poison: %s v%d of %s; dead-letter rows %d/%d (1 dead + %d parked expected); quarantined events in Kafka: %d; problems: %d",
				poison.ID, poison.Version, poison.AggregateID, n, len(quarantined), len(quarantined)-1, len(rep.Forbidden), len(dlProblems))
		}
		if cfg.Counts[faultLeaderKill] > 0 && leaderPoison == nil {
			dlProblems = append(dlProblems, "the leader-kill poison event was never committed")
		} else if leaderPoison != nil {
			problems, n := checkDeadLetter(env.DB, leaderQuarantined, 30*time.Second)
			dlProblems = append(dlProblems, problems...)
			poisonLine += fmt.Sprintf("\nleader-kill poison: %s v%d of %s; dead-letter rows %d/%d (1 dead + %d parked, most by the standby that took over)",
				leaderPoison.ID, leaderPoison.Version, leaderPoison.AggregateID, n, len(leaderQuarantined), len(leaderQuarantined)-1)
		}
	}
	c.summary(schedule, rep, seed, mode, ledgerOnly, tableOnly, deliveredIn, drained, len(records), poisonLine)
	for _, p := range dlProblems {
		t.Errorf("dead letter: %s", p)
	}

	if len(c.exits) > 0 {
		t.Errorf("the relay exited by itself %d times:\n  %s", len(c.exits), strings.Join(c.exits, "\n  "))
	}
	if len(ledgerOnly) > 0 || len(tableOnly) > 0 || c.stats.partial.Load() > 0 {
		t.Errorf("writer ledger and outbox table disagree: ledger-only=%d (e.g. %v) table-only=%d (e.g. %v) partial=%d",
			len(ledgerOnly), firstN(ledgerOnly, 3), len(tableOnly), firstN(tableOnly, 3), c.stats.partial.Load())
	}
	for i, f := range schedule {
		if f.Recovered {
			continue
		}
		if ext := c.external(schedule, f.Start, f.End.Add(cfg.RecoveryBound)); len(ext) > 0 {
			t.Logf("fault %d (%s): not recovered within %s, but the stack was restarted by someone else meanwhile (%s): not counted",
				i+1, f.Kind, cfg.RecoveryBound, fmtChanges(c.t0, ext))
			continue
		}
		t.Errorf("fault %d (%s): confirmed_flush_lsn did not pass the LSN at fault end within %s (%s)", i+1, f.Kind, cfg.RecoveryBound, f.Note)
	}
	if !delivered {
		t.Errorf("not every committed event was delivered within %s of stopping the writers", cfg.DrainBound)
	}
	if !confirmed {
		t.Errorf("confirmed_flush_lsn did not pass the final LSN %s (slot: %+v)", finalLSN, c.env.SlotInfo())
	}
	if !rep.OK() {
		t.Errorf("invariants violated: %s", rep)
	}
	if eos && rep.Duplicates != 0 {
		t.Errorf("exactly-once: %d duplicates among the read_committed records, want 0", rep.Duplicates)
	}
	if code, exited := c.relay.Term(20 * time.Second); !exited || code != 0 {
		t.Errorf("final SIGTERM: exited=%v code=%d, want a clean exit 0", exited, code)
	}
}

func (c *chaos) summary(schedule []*fault, rep *Report, seed int64, mode string, ledgerOnly, tableOnly []string,
	deliveredIn, drained time.Duration, records int, poisonLine string) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n=== TestChaos summary: mode=%s seed=%d relays started=%d run=%s ===\n", mode, seed, c.relays, time.Since(c.t0).Round(time.Second))
	fmt.Fprintf(&sb, "%-3s %-16s %8s %8s %10s %10s  %s\n", "#", "fault", "at", "took", "recovery", "canary", "note")
	type agg struct {
		n        int
		max, sum time.Duration
	}
	byKind := map[faultKind]*agg{}
	for i, f := range schedule {
		rec, can := "NOT", "NOT"
		if f.Recovered {
			rec = f.Recovery.Round(10 * time.Millisecond).String()
		}
		if f.CanaryOK {
			can = f.CanaryAfter.Round(10 * time.Millisecond).String()
		}
		note := f.Note
		if ext := c.external(schedule, f.Start, f.End.Add(f.Recovery)); len(ext) > 0 || !f.Recovered && len(c.external(schedule, f.Start, f.End.Add(c.cfg.RecoveryBound))) > 0 {
			note = strings.TrimPrefix(note+"; EXTERNAL stack restart overlapped", "; ")
		}
		fmt.Fprintf(&sb, "%-3d %-16s %8s %8s %10s %10s  %s\n", i+1, f.Kind, f.Start.Sub(c.t0).Round(100*time.Millisecond),
			f.End.Sub(f.Start).Round(100*time.Millisecond), rec, can, note)
		a := byKind[f.Kind]
		if a == nil {
			a = &agg{}
			byKind[f.Kind] = a
		}
		a.n++
		a.sum += f.Recovery
		if f.Recovery > a.max {
			a.max = f.Recovery
		}
	}
	kinds := make([]string, 0, len(byKind))
	for k := range byKind {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	var maxAll time.Duration
	for _, k := range kinds {
		a := byKind[faultKind(k)]
		fmt.Fprintf(&sb, "    %-16s n=%-2d max recovery %-8s mean %s\n", k, a.n, a.max.Round(10*time.Millisecond), (a.sum / time.Duration(a.n)).Round(10*time.Millisecond))
		if a.max > maxAll {
			maxAll = a.max
		}
	}
	ratio := 0.0
	if rep.Delivered > 0 {
		ratio = float64(rep.Duplicates) / float64(rep.Delivered)
	}
	fmt.Fprintf(&sb, "writers:   %s\n", c.stats.String())
	fmt.Fprintf(&sb, "committed: %d = %d to deliver + %d quarantined (ledger-only %d, table-only %d)\n",
		rep.Committed+c.quarantined, rep.Committed, c.quarantined, len(ledgerOnly), len(tableOnly))
	fmt.Fprintf(&sb, "delivered: %d  records: %d (background consumer %d)  drain: all delivered %s, confirmed %s after writers stopped\n",
		rep.Delivered, records, c.consumer.Count(), deliveredIn.Round(10*time.Millisecond), drained.Round(10*time.Millisecond))
	fmt.Fprintf(&sb, "lost: %d  inversions: %d  duplicates: %d (ratio %.4f)  unexpected: %d  other problems: %d  max ts skew: %s\n",
		len(rep.Lost), rep.Inversions, rep.Duplicates, ratio, len(rep.Unexpected), len(rep.Problems), rep.MaxTsSkew.Round(time.Millisecond))
	fmt.Fprintf(&sb, "max recovery: %s  unexpected relay exits: %d  proxies: pg[%s] kafka[%s]\n",
		maxAll.Round(10*time.Millisecond), len(c.exits), c.pgProxy.Stats(), c.kafkaProxy.Stats())
	fmt.Fprintf(&sb, "%s\n", poisonLine)
	if ext := c.external(schedule, c.t0, time.Now()); len(ext) > 0 {
		fmt.Fprintf(&sb, "WARNING: the shared stack was restarted by someone else during the run: %s\n", fmtChanges(c.t0, ext))
	}
	fmt.Print(sb.String())
	c.t.Log(sb.String())
}

// readTopic reads every partition of topic from its first offset up to the
// end offset at the time of the call.
func readTopic(topic string, partitions int, bound time.Duration) ([]Record, error) {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var (
		mu   sync.Mutex
		out  []Record
		errs []error
		wg   sync.WaitGroup
	)
	for p := 0; p < partitions; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			recs, err := readPartition(ctx, topic, p)
			mu.Lock()
			defer mu.Unlock()
			out = append(out, recs...)
			if err != nil {
				errs = append(errs, fmt.Errorf("partition %d: %w", p, err))
			}
		}(p)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

func readPartition(ctx context.Context, topic string, p int) ([]Record, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", kafkaBrokers[0], topic, p)
	if err != nil {
		return nil, err
	}
	first, last, err := conn.ReadOffsets()
	conn.Close()
	if err != nil {
		return nil, err
	}
	if last <= first {
		return nil, nil
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: kafkaBrokers, Topic: topic, Partition: p,
		MinBytes: 1, MaxBytes: 16 << 20, MaxWait: 250 * time.Millisecond, MaxAttempts: 1 << 30,
	})
	defer r.Close()
	if err := r.SetOffset(first); err != nil {
		return nil, err
	}
	out := make([]Record, 0, last-first)
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			return out, fmt.Errorf("at offset %d of [%d, %d): %w", r.Offset(), first, last, err)
		}
		rec := Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: m.Value,
			Headers: make(map[string]string, len(m.Headers)), HeaderN: make(map[string]int, len(m.Headers)), Time: m.Time, Seen: time.Now()}
		for _, h := range m.Headers {
			rec.Headers[h.Key] = string(h.Value)
			rec.HeaderN[h.Key]++
		}
		out = append(out, rec)
		if m.Offset >= last-1 {
			return out, nil
		}
	}
}

func fmtChanges(t0 time.Time, chs []stackChange) string {
	parts := make([]string, len(chs))
	for i, ch := range chs {
		parts[i] = fmt.Sprintf("%s %s->%s at +%s", ch.What, ch.From, ch.To, ch.At.Sub(t0).Round(100*time.Millisecond))
	}
	return strings.Join(parts, ", ")
}

// relaySupportsDLQ reports whether the binary has the dead-letter feature
// (docs/design.md "Issue 3 additions"): `outbox-relay dlq --help` exits 0.
func relaySupportsDLQ(t *testing.T) (bool, string) {
	t.Helper()
	requireRelay(t)
	res := runCLI(t, 20*time.Second, processEnv(), "dlq", "--help")
	return res.Code == 0, fmt.Sprintf("exit %d: %s", res.Code, strings.TrimSpace(tail(res.Stderr+res.Stdout, 2)))
}

// TestChaosPoison: a poison event (headers not an object of strings) in the
// middle of a busy aggregate P, no other faults. Everything else must still be
// delivered; the poison and every later event of P must be in
// outbox_dead_letter (dead, then parked, in aggregate_version order) and not
// in Kafka; P's earlier events must be delivered; the relay keeps running and
// the slot keeps advancing. TestChaos repeats this under its fault schedule.
func TestChaosPoison(t *testing.T) {
	inSuites(t, exclusive, stack)
	if ok, out := relaySupportsDLQ(t); !ok {
		t.Skipf("poison part skipped: the relay has no dead-letter support yet (`outbox-relay dlq --help`: %s)", out)
	}
	env := NewEnv(t, EnvOptions{})
	relay := env.StartRelay()
	c := StartConsumer(t, env.Topic, env.Partitions)
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewSource(chaosSeed()))

	// Each transaction: 4 events of other aggregates and one of P.
	write := func(txs int) {
		for i := 0; i < txs; i++ {
			ids := []string{aggName(rng.Intn(30)), aggName(rng.Intn(30)), chaosPoisonAgg, aggName(rng.Intn(30)), aggName(rng.Intn(30))}
			if _, err := w.Write(ctx, ids, true); err != nil {
				t.Fatalf("write: %v", err)
			}
			// wall-clock: paces the writer (a transaction every 3 ms)
			time.Sleep(3 * time.Millisecond)
		}
	}
	write(150)
	poison := w.NextEvents([]string{chaosPoisonAgg})[0]
	tx, err := env.DB.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertPoison(ctx, tx, env.QuotedTable(), poison); err != nil {
		t.Fatalf("insert poison: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit poison: %v", err)
	}
	ledger.addCommitted([]Event{poison}, "")
	t.Logf("poison event %s: aggregate %s version %d, headers {\"bad\": 1}", poison.ID, chaosPoisonAgg, poison.Version)
	write(150)
	finalLSN := env.CurrentInsertLSN()

	expected := ledger.Committed()
	quarantined := splitPoisoned(expected, poison)
	dropDeadLetter(t, env.DB, func() []Event { return quarantined })
	forbidden := map[string]Event{}
	for _, e := range quarantined {
		forbidden[e.ID] = e
	}

	ok := c.WaitFor(expected, 90*time.Second, 0)
	problems, n := checkDeadLetter(env.DB, quarantined, 60*time.Second)
	time.Sleep(2 * time.Second) // wall-clock: a negative window: anything wrongly published would show up by now
	confirmed := within(30*time.Second, 200*time.Millisecond, func() bool { return env.ConfirmedAtLeast(finalLSN) })
	rep := c.Check(expected, CheckOptions{Forbidden: forbidden})

	msg := fmt.Sprintf("TestChaosPoison: expected=%d delivered=%d lost=%d quarantined_in_kafka=%d duplicates=%d inversions=%d dead_letter_rows=%d/%d confirmed_past_end=%v",
		rep.Committed, rep.Delivered, len(rep.Lost), len(rep.Forbidden), rep.Duplicates, rep.Inversions, n, len(quarantined), confirmed)
	t.Log(msg)
	fmt.Println(msg)
	if !ok {
		t.Errorf("not every event outside the quarantined tail of %s was delivered", chaosPoisonAgg)
	}
	if !rep.OK() {
		t.Errorf("delivery check: %s", rep)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if !relay.Running() {
		t.Errorf("relay exited (code %d); with POISON_POLICY=quarantine it must keep running", relay.exitCode)
	}
	if !confirmed {
		t.Errorf("confirmed_flush_lsn %s did not pass %s: the quarantine must not pin the slot", env.SlotInfo().ConfirmedFlush, finalLSN)
	}
}
