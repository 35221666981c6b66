//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestClusterInboxCoordinatorKill is fault 6 of issue 28: a consumer group
// across a broker kill that takes the group coordinator with it. Every
// effect must still be applied exactly once, and no offset may be
// committed past a record whose effect was not committed.
//
// On the three-node cluster, a 6-partition topic (the brokers' defaults:
// replication factor 3, min.insync.replicas 2) takes a steady stream of
// events from one producer goroutine per partition (a plain kafka-go
// Writer with RequiredAcks all; each partition's aggregates get their
// versions in order, one wave after the other, and a producer waits only
// for its own partition). Two inbox instances of one consumer (A and B,
// one group) apply each event's effect: a row in an effects table whose
// applied count is incremented by an upsert, so an effect applied twice
// shows as a 2, and whose seq column gives the order of the applications.
//
//  1. The group's coordinator (FindCoordinator with the group id) is
//     killed with SIGKILL while records flow, and the producers go on. The
//     test measures how long after the kill the effects resume (the first
//     effect, applied in a generation that started after the kill, of a
//     record produced after the kill) and how long the group takes to
//     catch up (the backlog back to its level before the kill), both from
//     the moment kafkacluster.sh kill returned; then the killed node is
//     started again. Two waits add up there: every partition's acks=all
//     writes stall until the controller fences the dead broker and drops
//     it from the ISRs (broker.session.timeout.ms, 6s), which is also when
//     the coordinator moves; then kafka-go rejoins as a new member (it
//     drops its member id when it cannot reach the old coordinator), so
//     the new coordinator waits a rebalance timeout for the old members.
//  2. A crash under load: at a random moment the handlers freeze (each one
//     that starts blocks inside its transaction, as in a process that
//     stopped there), every Kafka connection of A and B is closed and no
//     new one can be opened (their Dialer goes through a switch), and
//     their Run contexts are cancelled with ShutdownTimeout -1: the batches
//     in flight are cancelled at once, and neither the final offset commit
//     nor the LeaveGroup of a clean stop reaches the cluster. Cancelling
//     Run alone would be a clean stop: it commits the offsets of every
//     finished batch and leaves the group. The offsets the group has
//     committed at the crash must not be past any record without a
//     committed effect (in particular not past a frozen one); a fresh
//     instance C in the same group then takes over once A's and B's
//     sessions expire, and catches up.
//
// At the end every produced event must have exactly one effect (applied
// count 1, none missing, none unexpected), each aggregate's effects must
// have been applied in version order, and every committed-offset snapshot
// the test took along the way (twice a second) must lie at or before
// records whose effects were committed before the snapshot. The
// redeliveries the inbox absorbed are the instances' Stats.Duplicates.
func TestClusterInboxCoordinatorKill(t *testing.T) {
	inSuites(t, exclusive, cluster)
	cluster := RequireCluster(t)
	began := time.Now()
	env := NewEnv(t, EnvOptions{NoMigrate: true, Partitions: 6})
	schema := inboxSchema(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cikRequireReplicated(t, ctx, env.Topic, env.Partitions, cluster.Nodes)

	pool := ibPool(t, ctx, 2)
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	eff := &cikEffects{table: pgx.Identifier{schema, "effects"}.Sanitize()}
	// No unique key does the inbox's work here: the primary key only lets
	// the upsert count a second application instead of adding a row.
	if _, err := pool.Exec(ctx, `CREATE TABLE `+eff.table+` (event_id uuid PRIMARY KEY, aggregate text NOT NULL,
		version bigint NOT NULL, seq bigserial NOT NULL, applied int NOT NULL, applied_at timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	consumer := "ck_" + env.Sfx
	logs := &cikLogs{}
	crashNet := &cikSwitch{}
	instance := func(name string, crashable bool) *ibRun {
		logger := slog.New(logs.handler(name))
		cfg := inbox.Config{
			Name: consumer, Brokers: kafkaBrokers, Topics: []string{env.Topic}, Pool: ibPool(t, ctx, 4), Schema: schema,
			Handler: eff.handle, BatchSize: 200, CommitInterval: 200 * time.Millisecond,
			BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
			TuneReader: func(rc *kafka.ReaderConfig) {
				ibFastGroup(rc)
				rc.Logger = cikMembership(logger)
			},
		}
		if crashable {
			// Their Kafka connections go through crashNet, which the crash
			// cuts, and their batches in flight are cancelled at once:
			// nothing the inbox would do on a clean stop happens.
			cfg.ShutdownTimeout = -1
			cfg.TuneReader = func(rc *kafka.ReaderConfig) {
				ibFastGroup(rc)
				rc.Logger = cikMembership(logger)
				rc.Dialer = &kafka.Dialer{Timeout: 10 * time.Second, DialFunc: crashNet.dial}
			}
		}
		c, err := inbox.New(cfg, inbox.WithLogger(logger))
		if err != nil {
			t.Fatal(err)
		}
		return ibStart(t, ctx, name, c)
	}

	load := startCikLoad(t, ctx, env.Topic, env.Partitions, 4, 50*time.Millisecond)
	a := instance("A", true)
	b := instance("B", true)
	mon := startCikMonitor(ctx, env.DB, eff.table, consumer, env.Topic, env.Partitions, load)
	defer mon.halt()
	if !within(45*time.Second, 50*time.Millisecond, func() bool { return a.c.Stats().Applied > 200 && b.c.Stats().Applied > 200 }) {
		t.Fatalf("A and B did not both apply events within 45s: A %+v, B %+v", a.c.Stats(), b.c.Stats())
	}
	load.check(t)
	time.Sleep(2 * time.Second) // wall-clock: load flows to the backlog's level before the fault

	// 1. Kill the group coordinator.
	coord := cikCoordinator(t, ctx, consumer)
	controller := cluster.Controller()
	leaders := cluster.Leaders(env.Topic)
	t.Logf("group %s: coordinator node %d, active controller %d, partition leaders %v; before the kill A %+v, B %+v",
		consumer, coord, controller, leaders, a.c.Stats(), b.c.Stats())
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			cluster.Start(coord)
		}
	})
	killCall := time.Now()
	cluster.Kill(coord)
	killAt := time.Now() // the node is gone: what the clients see from now on
	baseline := mon.maxBacklog(killAt.Add(-2*time.Second), killAt)
	threshold := max(2*baseline, baseline+48)
	t.Logf("node %d killed (the kill call took %s); backlog before the kill at most %d records, caught up at %d or less",
		coord, killAt.Sub(killCall).Round(time.Millisecond), baseline, threshold)

	var genAt time.Time
	var caught cikSample
	if !within(60*time.Second, 50*time.Millisecond, func() bool {
		load.check(t)
		if genAt.IsZero() {
			if genAt = logs.generationAfter(killAt); genAt.IsZero() {
				return false
			}
		}
		s := mon.last()
		if s.at.After(genAt) && s.acked-s.effects <= threshold {
			caught = s
			return true
		}
		return false
	}) {
		s := mon.last()
		t.Fatalf("the group did not recover within 60s of the kill: a generation after the kill at %s, backlog %d (threshold %d); A %+v, B %+v\n%s",
			cikSince(genAt, killAt), s.acked-s.effects, threshold, a.c.Stats(), b.c.Stats(), logs.report(killAt))
	}
	newCoord := cikCoordinator(t, ctx, consumer)
	t.Logf("recovered: first generation after the kill at +%s, caught up at +%s (backlog %d); coordinator now node %d; A %+v, B %+v",
		genAt.Sub(killAt).Round(time.Millisecond), caught.at.Sub(killAt).Round(time.Millisecond), caught.acked-caught.effects,
		newCoord, a.c.Stats(), b.c.Stats())
	cluster.Start(coord)
	restarted = true
	startedAt := time.Now()
	if n := cikBrokers(t, ctx, cluster.Nodes); n != cluster.Nodes {
		t.Fatalf("15s after starting node %d the metadata lists %d brokers, want %d", coord, n, cluster.Nodes)
	}

	// 2. Crash both instances at a random moment under load.
	// wall-clock: load flows until a random moment, when the crash lands
	time.Sleep(500*time.Millisecond + rand.N(2*time.Second))
	eff.frozen.Store(true)
	if !within(5*time.Second, time.Millisecond, func() bool { return eff.heldCount() > 0 }) {
		t.Fatalf("no handler started within 5s of the freeze: the crash would catch no batch in flight")
	}
	crashAt := time.Now()
	cut := crashNet.cut()
	a.cancel()
	b.cancel()
	for _, r := range []*ibRun{a, b} {
		cikAwaitRun(t, r, 30*time.Second)
	}
	t.Logf("A and B crashed %s after node %d came back: %d Kafka connections cut, %d frozen handler(s); both Runs returned %s after the cancel",
		crashAt.Sub(startedAt).Round(time.Millisecond), coord, cut, eff.heldCount(), time.Since(crashAt).Round(time.Millisecond))
	load.halt()
	load.check(t)
	crashOffs := cikCommitted(t, ctx, consumer, env.Topic, env.Partitions)
	held := eff.takeHeld()
	eff.frozen.Store(false)

	cStart := time.Now()
	c := instance("C", false)
	total := int(load.acked.Load())
	if len(load.events) != total {
		t.Fatalf("%d events produced, %d of them acknowledged: a producer stopped mid-wave", len(load.events), total)
	}
	// C has caught up when its committed offsets reach the end offsets:
	// the inbox commits an offset only after the outcomes before it, so
	// every effect is in PostgreSQL by then (the checks below say whether
	// it is).
	ends := cikEndOffsets(t, env.Topic, env.Partitions)
	if !within(60*time.Second, 100*time.Millisecond, func() bool {
		offs, err := cikOffsets(ctx, consumer, env.Topic, env.Partitions)
		return err == nil && slices.Equal(offs, ends)
	}) {
		offs, err := cikOffsets(ctx, consumer, env.Topic, env.Partitions)
		t.Fatalf("C's committed offsets %v (%v) did not reach the end offsets %v within 60s; %d effects of %d produced events; C %+v",
			offs, err, ends, countRows(t, env.DB, `SELECT count(*) FROM `+eff.table), total, c.c.Stats())
	}
	caughtUpC := time.Since(cStart)
	c.stop(t)
	mon.halt()

	// Read every record back: which event each offset holds.
	readBack := StartConsumer(t, env.Topic, env.Partitions)
	var records int64
	for _, e := range ends {
		records += e
	}
	if !readBack.WaitCount(int(records), 30*time.Second) {
		t.Fatalf("read back %d of %d records", readBack.Count(), records)
	}
	readBack.Stop()
	byOffset := make([]map[int64]string, env.Partitions)
	for p := range byOffset {
		byOffset[p] = map[int64]string{}
	}
	for _, r := range readBack.Records() {
		byOffset[r.Partition][r.Offset] = r.EventID()
	}
	effects := cikLoadEffects(t, env.DB, eff.table)

	// Exactly once, none missing, none unexpected.
	var missing, double, unexpected []string
	for id := range load.events {
		switch e, ok := effects[id]; {
		case !ok:
			missing = append(missing, id)
		case e.applied != 1:
			double = append(double, fmt.Sprintf("%s:%d", id, e.applied))
		}
	}
	for id := range effects {
		if _, ok := load.events[id]; !ok {
			unexpected = append(unexpected, id)
		}
	}
	// Per aggregate: the effects in application order have versions 1..n.
	perAgg := map[string][]cikEffect{}
	for _, e := range effects {
		perAgg[e.aggregate] = append(perAgg[e.aggregate], e)
	}
	var disorder []string
	for agg, es := range perAgg {
		sort.Slice(es, func(i, j int) bool { return es[i].seq < es[j].seq })
		for i, e := range es {
			if e.version != int64(i+1) {
				disorder = append(disorder, fmt.Sprintf("%s: application %d has version %d", agg, i+1, e.version))
				break
			}
		}
	}
	// Committed offsets: never past a record whose effect was not committed
	// before the offsets were read. prefix[p][o] is the latest application
	// of the records at offsets 0..o of partition p (the zero Time: one has
	// none at all).
	prefix := cikPrefixApplied(byOffset, effects, ends)
	pastUnfinished := func(at time.Time, offs []int64) string {
		for p, o := range offs {
			if o <= 0 {
				continue
			}
			if o > ends[p] {
				return fmt.Sprintf("partition %d: committed %d, past the end offset %d", p, o, ends[p])
			}
			if last := prefix[p][o-1]; last.IsZero() || !last.Before(at) {
				for k := int64(0); k < o; k++ {
					if e, ok := effects[byOffset[p][k]]; !ok || !e.at.Before(at) {
						return fmt.Sprintf("partition %d: committed %d, but the record at offset %d (event %s) had no committed effect then (effect: %v)",
							p, o, k, byOffset[p][k], cikSince(e.at, at))
					}
				}
			}
		}
		return ""
	}
	var snapViolations []string
	snaps := mon.snapshots()
	for _, s := range snaps {
		if v := pastUnfinished(s.at, s.offsets); v != "" {
			snapViolations = append(snapViolations, fmt.Sprintf("snapshot at %+.1fs: %s", s.at.Sub(killAt).Seconds(), v))
		}
	}
	crashViolation := pastUnfinished(cStart, crashOffs)
	var heldViolations []string
	for _, h := range held {
		if crashOffs[h.partition] > h.offset {
			heldViolations = append(heldViolations, fmt.Sprintf("partition %d: committed %d at the crash, past offset %d (event %s) whose transaction was open",
				h.partition, crashOffs[h.partition], h.offset, h.id))
		}
	}

	// Timing from the effects: when they resumed, and the stall.
	var firstPost, resume time.Time
	applied := make([]time.Time, 0, len(effects))
	for id, e := range effects {
		applied = append(applied, e.at)
		if ev, ok := load.events[id]; ok && ev.sent.After(killAt) {
			if firstPost.IsZero() || e.at.Before(firstPost) {
				firstPost = e.at
			}
			if !e.at.Before(genAt) && (resume.IsZero() || e.at.Before(resume)) {
				resume = e.at
			}
		}
	}
	slices.SortFunc(applied, func(x, y time.Time) int { return x.Compare(y) })
	var stallFrom, stallTo time.Time
	for i := 1; i < len(applied); i++ {
		if applied[i].After(killAt) && applied[i].Before(caught.at) && applied[i].Sub(applied[i-1]) > stallTo.Sub(stallFrom) {
			stallFrom, stallTo = applied[i-1], applied[i]
		}
	}

	var redelivered, appliedN int64
	for _, r := range []*ibRun{a, b, c} {
		st := r.c.Stats()
		t.Logf("%s: %+v", r.name, st)
		redelivered += st.Duplicates
		appliedN += st.Applied
		if st.DeadLettered != 0 || st.Parked != 0 {
			t.Errorf("%s dead-lettered %d and parked %d events", r.name, st.DeadLettered, st.Parked)
		}
	}
	processed := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, inbox.ProcessedTable}.Sanitize()+` WHERE consumer = $1`, consumer)
	deadRows := countRows(t, env.DB, `SELECT count(*) FROM `+pgx.Identifier{schema, inbox.DeadLetterTable}.Sanitize())
	t.Logf("load: %d events in %d records (%d write retries); handler ran %d times for %d effects (%d runs rolled back, %d of them frozen at the crash)",
		total, records, load.retries.Load(), eff.calls.Load(), len(effects), eff.calls.Load()-int64(len(effects)), len(held))
	t.Logf("after the kill: first effect of a record produced after the kill at %s, first generation at %s, "+
		"effects resumed at %s, longest pause between two effects %s (%s to %s); %d committed-offset snapshots, %d failed reads (coordinator away)",
		cikSince(firstPost, killAt), cikSince(genAt, killAt), cikSince(resume, killAt), stallTo.Sub(stallFrom).Round(time.Millisecond),
		cikSince(stallFrom, killAt), cikSince(stallTo, killAt), len(snaps), mon.offsetErrs.Load())
	t.Logf("backlog around the kill (time: acknowledged/effects): %s", mon.timeline(killAt.Add(-time.Second), caught.at.Add(time.Second), killAt))
	t.Logf("at the crash: committed offsets %v, end offsets %v; C caught up in %s", crashOffs, ends, caughtUpC.Round(time.Millisecond))
	t.Log(logs.report(killAt))

	took := time.Since(began)
	msg := fmt.Sprintf("TestClusterInboxCoordinatorKill: coordinator=%d produced=%d effects=%d missing=%d double_applied=%d redelivered=%d "+
		"resume_after=%.1fs caught_up_after=%.1fs records=%d out_of_order=%d committed_past_unfinished=%d crash_in_flight=%d took=%s",
		coord, total, len(effects), len(missing), len(double), redelivered, cikSeconds(resume, killAt), caught.at.Sub(killAt).Seconds(),
		records, len(disorder), len(snapViolations)+len(heldViolations)+min(len(crashViolation), 1), len(held), took.Round(time.Second))
	t.Log(msg)
	fmt.Println(msg)

	if len(missing) > 0 || len(double) > 0 || len(unexpected) > 0 {
		t.Errorf("effects must be exactly one per produced event: %d missing (e.g. %v), %d applied more than once (e.g. %v), %d not produced (e.g. %v)",
			len(missing), missing[:min(len(missing), 5)], len(double), double[:min(len(double), 5)], len(unexpected), unexpected[:min(len(unexpected), 5)])
	}
	if len(disorder) > 0 {
		t.Errorf("%d aggregates' effects out of version order, e.g. %v", len(disorder), disorder[:min(len(disorder), 5)])
	}
	if crashViolation != "" {
		t.Errorf("offsets committed at the crash are past an unfinished record: %s", crashViolation)
	}
	if len(heldViolations) > 0 {
		t.Errorf("offsets committed past a batch in flight at the crash: %v", heldViolations[:min(len(heldViolations), 5)])
	}
	if len(snapViolations) > 0 {
		t.Errorf("%d committed-offset snapshots are past records without a committed effect, e.g. %v", len(snapViolations), snapViolations[:min(len(snapViolations), 5)])
	}
	// A batch whose COMMIT was on its way when the crash cancelled A or B
	// committed without being counted (pgx reports the cancelled commit as
	// failed): its events are redelivered to C and absorbed as
	// duplicates. So every event was counted applied once, or found done
	// by C.
	uncounted := int64(total) - appliedN
	if uncounted < 0 || uncounted > c.c.Stats().Duplicates || processed != total || deadRows != 0 {
		t.Errorf("the instances applied %d events (C absorbed %d duplicates) and processed_events has %d rows for %d produced; %d dead-letter rows",
			appliedN, c.c.Stats().Duplicates, processed, total, deadRows)
	} else if uncounted > 0 {
		t.Logf("%d events committed by a batch the crash cut during its COMMIT: uncounted by A and B, absorbed by C as duplicates", uncounted)
	}
	if resume.IsZero() {
		t.Errorf("no effect of a record produced after the kill was applied in a generation that started after it")
	}
	if redelivered == 0 {
		t.Logf("warning: no redelivery was absorbed, so this run did not exercise the dedupe")
	}
	if n := cikBrokers(t, ctx, cluster.Nodes); n != cluster.Nodes {
		t.Errorf("at the end the metadata lists %d brokers, want %d", n, cluster.Nodes)
	}
}

// cikRequireReplicated fails unless every partition of topic has nodes
// replicas and the topic's min.insync.replicas is 2: the fault needs a
// replica of every partition (and of the group's offsets) to survive.
func cikRequireReplicated(t *testing.T, ctx context.Context, topic string, partitions, nodes int) {
	t.Helper()
	md, err := kafkaClient().Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
		t.Fatalf("metadata of %s: %v %+v", topic, err, md)
	}
	for _, p := range md.Topics[0].Partitions {
		if len(p.Replicas) != nodes {
			t.Fatalf("%s partition %d has %d replicas, want %d (the cluster's default replication factor)", topic, p.ID, len(p.Replicas), nodes)
		}
	}
	// DescribeConfigs goes to any broker, and a broker that has not yet
	// applied the topic's creation from the metadata log answers
	// UNKNOWN_TOPIC_OR_PARTITION: ask again for a while before judging.
	var dc *kafka.DescribeConfigsResponse
	deadline := time.Now().Add(15 * time.Second)
	for {
		dc, err = kafkaClient().DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
			ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"min.insync.replicas"}}}})
		unknown := err == nil && len(dc.Resources) == 1 && errors.Is(dc.Resources[0].Error, kafka.UnknownTopicOrPartition)
		if !unknown || time.Now().After(deadline) {
			break
		}
		// wall-clock: poll interval of a wait on the topic with a deadline
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || len(dc.Resources) != 1 || len(dc.Resources[0].ConfigEntries) != 1 || dc.Resources[0].ConfigEntries[0].ConfigValue != "2" {
		t.Fatalf("%s: min.insync.replicas not 2: %v %+v", topic, err, dc)
	}
}

// cikCoordinator returns the node id of group's coordinator. A group not
// yet known to the cluster gets one too: the coordinator is the leader of
// the __consumer_offsets partition the group id hashes to.
func cikCoordinator(t *testing.T, ctx context.Context, group string) int {
	t.Helper()
	var last error
	// wall-clock: poll interval of a wait on the coordinator with a deadline
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		res, err := kafkaClient().FindCoordinator(fctx, &kafka.FindCoordinatorRequest{Key: group, KeyType: kafka.CoordinatorKeyTypeConsumer})
		cancel()
		switch {
		case err != nil:
			last = err
		case res.Error != nil:
			last = res.Error
		case res.Coordinator == nil:
			last = errors.New("no coordinator in the answer")
		default:
			return res.Coordinator.NodeID
		}
	}
	t.Fatalf("FindCoordinator %s: %v", group, last)
	return 0
}

// cikBrokers returns how many brokers the metadata lists, waiting up to
// 15s for want: kafkacluster.sh start returns once one other node lists
// the restarted one, and the node that answers here may learn it a moment
// later.
func cikBrokers(t *testing.T, ctx context.Context, want int) int {
	t.Helper()
	n := 0
	var err error
	within(15*time.Second, 200*time.Millisecond, func() bool {
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var md *kafka.MetadataResponse
		if md, err = kafkaClient().Metadata(mctx, &kafka.MetadataRequest{}); err == nil {
			n = len(md.Brokers)
		}
		return n == want
	})
	if n == 0 && err != nil {
		t.Fatalf("cluster metadata: %v", err)
	}
	return n
}

// cikOffsets reads group's committed offset of each partition of topic (-1:
// none). It fails while the coordinator is away or loading the group.
func cikOffsets(ctx context.Context, group, topic string, partitions int) ([]int64, error) {
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	octx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	res, err := kafkaClient().OffsetFetch(octx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: ps}})
	if err != nil {
		return nil, err
	}
	if res.Error != nil {
		return nil, res.Error
	}
	out := make([]int64, partitions)
	for i := range out {
		out[i] = -1
	}
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("partition %d: %w", p.Partition, p.Error)
		}
		out[p.Partition] = p.CommittedOffset
	}
	return out, nil
}

// cikCommitted is cikOffsets, retried for up to 10s.
func cikCommitted(t *testing.T, ctx context.Context, group, topic string, partitions int) []int64 {
	t.Helper()
	var offs []int64
	var err error
	if !within(10*time.Second, 200*time.Millisecond, func() bool {
		offs, err = cikOffsets(ctx, group, topic, partitions)
		return err == nil
	}) {
		t.Fatalf("committed offsets of %s: %v", group, err)
	}
	return offs
}

// cikEndOffsets returns each partition's end offset.
func cikEndOffsets(t *testing.T, topic string, partitions int) []int64 {
	t.Helper()
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := 0; p < partitions; p++ {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := kafkaClient().ListOffsets(ctx, req)
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	out := make([]int64, partitions)
	for _, po := range res.Topics[topic] {
		if po.Error != nil {
			t.Fatalf("list offsets of %s partition %d: %v", topic, po.Partition, po.Error)
		}
		out[po.Partition] = po.LastOffset
	}
	return out
}

// cikAwaitRun waits for a cancelled Run and fails the test unless it
// returns nil within d; a Run that hangs leaves a goroutine dump behind,
// the evidence of where the inbox is stuck.
func cikAwaitRun(t *testing.T, r *ibRun, d time.Duration) {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for ibStart's cleanup
		if err != nil {
			t.Fatalf("%s: Run = %v, want nil after a cancel", r.name, err)
		}
	case <-time.After(d):
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%s: Run did not return within %s of its cancellation; goroutines:\n%s", r.name, d, buf)
	}
}

// cikSince formats at relative to ref ("-" for the zero Time).
func cikSince(at, ref time.Time) string {
	if at.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%+.2fs", at.Sub(ref).Seconds())
}

// cikSeconds is at - ref in seconds, -1 for the zero Time.
func cikSeconds(at, ref time.Time) float64 {
	if at.IsZero() {
		return -1
	}
	return at.Sub(ref).Seconds()
}

// cikSwitch is the network of the instances that crash: their Kafka
// connections are dialed through it, and cut closes them all and refuses
// new ones, the way a crashed process's connections end: neither the final
// offset commit nor the LeaveGroup of a clean stop reaches the cluster.
type cikSwitch struct {
	mu     sync.Mutex
	closed bool
	conns  []net.Conn
}

var errCikCrashed = errors.New("the process crashed")

func (s *cikSwitch) dial(ctx context.Context, network, address string) (net.Conn, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errCikCrashed
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, errCikCrashed
	}
	s.conns = append(s.conns, c)
	return c, nil
}

// cut closes every connection and refuses new ones; it returns how many
// it closed (some may have been closed already).
func (s *cikSwitch) cut() int {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return len(conns)
}

// cikEffects is the handler: one effects row per event, its applied count
// incremented by a second application.
type cikEffects struct {
	table  string
	calls  atomic.Int64 // handler runs, committed or not
	frozen atomic.Bool  // the crash: a handler that starts blocks until its transaction is cancelled

	mu   sync.Mutex
	held []cikHeld // the events whose handler the freeze blocked
}

// cikHeld is an event whose transaction was open at the crash.
type cikHeld struct {
	id        string
	partition int
	offset    int64
}

func (e *cikEffects) handle(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
	e.calls.Add(1)
	if e.frozen.Load() {
		e.mu.Lock()
		e.held = append(e.held, cikHeld{ev.ID, ev.Partition, ev.Offset})
		e.mu.Unlock()
		<-ctx.Done()
		return ctx.Err()
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+e.table+` AS e (event_id, aggregate, version, applied, applied_at)
		VALUES ($1, $2, $3, 1, clock_timestamp()) ON CONFLICT (event_id) DO UPDATE SET applied = e.applied + 1`,
		ev.ID, ev.AggregateID, ev.AggregateVersion)
	return err
}

func (e *cikEffects) heldCount() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.held)
}

func (e *cikEffects) takeHeld() []cikHeld {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.held
	e.held = nil
	return h
}

// cikEffect is one row of the effects table.
type cikEffect struct {
	aggregate string
	version   int64
	seq       int64
	applied   int
	at        time.Time
}

func cikLoadEffects(t *testing.T, db *DB, table string) map[string]cikEffect {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string]cikEffect{}
	err := db.WithConn(ctx, func(c *pgx.Conn) error {
		rows, err := c.Query(ctx, `SELECT event_id::text, aggregate, version, seq, applied, applied_at FROM `+table)
		if err != nil {
			return err
		}
		var id string
		var e cikEffect
		_, err = pgx.ForEachRow(rows, []any{&id, &e.aggregate, &e.version, &e.seq, &e.applied, &e.at}, func() error {
			out[id] = e
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatalf("effects: %v", err)
	}
	return out
}

// cikPrefixApplied returns, per partition and offset o, the latest
// application time of the records at offsets 0..o, or the zero Time when
// one of them has no effect.
func cikPrefixApplied(byOffset []map[int64]string, effects map[string]cikEffect, ends []int64) [][]time.Time {
	out := make([][]time.Time, len(ends))
	for p, end := range ends {
		out[p] = make([]time.Time, end)
		var latest time.Time
		broken := false
		for o := int64(0); o < end; o++ {
			e, ok := effects[byOffset[p][o]]
			if !ok {
				broken = true
			}
			if !broken && e.at.After(latest) {
				latest = e.at
			}
			if !broken {
				out[p][o] = latest
			}
		}
	}
	return out
}

// cikEvent is one produced event.
type cikEvent struct {
	aggregate string
	version   int64
	sent      time.Time // the first attempt to write it
}

// cikLoad produces waves of events, one goroutine per partition: each wave
// is the next version of each of the partition's aggregates, written (and
// acknowledged by all in-sync replicas) before the next, so versions reach
// the partition in order. A write that fails is repeated with the same
// events (at worst a record twice, which the inbox absorbs).
type cikLoad struct {
	w       *kafka.Writer
	stop    atomic.Bool
	wg      sync.WaitGroup
	closed  sync.Once
	errs    chan error
	acked   atomic.Int64 // events acknowledged
	retries atomic.Int64 // writes repeated

	mu     sync.Mutex
	events map[string]cikEvent // by event id; read without mu once halted
}

func startCikLoad(t *testing.T, ctx context.Context, topic string, partitions, perPartition int, pause time.Duration) *cikLoad {
	t.Helper()
	l := &cikLoad{
		w: &kafka.Writer{Addr: kafka.TCP(kafkaBrokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
			RequiredAcks: kafka.RequireAll, BatchTimeout: time.Millisecond, MaxAttempts: 5,
			WriteBackoffMin: 100 * time.Millisecond, WriteBackoffMax: 500 * time.Millisecond,
			// The default metadata TTL (6s) would keep a partition that
			// moved to a new leader stalled that long after the election.
			Transport: &kafka.Transport{MetadataTTL: time.Second}},
		errs:   make(chan error, partitions),
		events: map[string]cikEvent{},
	}
	aggs := make([][]string, partitions)
	for i, full := 0, 0; full < partitions; i++ {
		name := fmt.Sprintf("agg-%03d", i)
		if p := partitionOf(name, partitions); len(aggs[p]) < perPartition {
			if aggs[p] = append(aggs[p], name); len(aggs[p]) == perPartition {
				full++
			}
		}
	}
	for p := range aggs {
		l.wg.Add(1)
		go l.run(ctx, aggs[p], pause)
	}
	t.Cleanup(l.halt)
	return l
}

func (l *cikLoad) run(ctx context.Context, aggs []string, pause time.Duration) {
	defer l.wg.Done()
	for v := int64(1); !l.stop.Load(); v++ {
		msgs := make([]kafka.Message, len(aggs))
		now := time.Now()
		l.mu.Lock()
		for i, agg := range aggs {
			id := uuid.NewString()
			l.events[id] = cikEvent{aggregate: agg, version: v, sent: now}
			msgs[i] = relayRecord(id, "order", agg, v, "order.updated", `{}`)
		}
		l.mu.Unlock()
		if err := l.write(ctx, msgs); err != nil {
			l.errs <- err
			return
		}
		l.acked.Add(int64(len(msgs)))
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
	}
}

// write writes msgs until every one is acknowledged, repeating the failed
// ones (for up to 45s).
func (l *cikLoad) write(ctx context.Context, msgs []kafka.Message) error {
	start := time.Now()
	for {
		err := l.w.WriteMessages(ctx, msgs...)
		if err == nil {
			return nil
		}
		var we kafka.WriteErrors
		if errors.As(err, &we) && len(we) == len(msgs) {
			var failed []kafka.Message
			for i, e := range we {
				if e != nil {
					failed = append(failed, msgs[i])
				}
			}
			if len(failed) > 0 {
				msgs = failed
			}
		}
		l.retries.Add(1)
		if ctx.Err() != nil || time.Since(start) > 45*time.Second {
			return fmt.Errorf("producer: %d records still unacknowledged after %s: %w", len(msgs), time.Since(start).Round(time.Millisecond), err)
		}
		// wall-clock: retry interval of the producer (bounded: 45 s)
		time.Sleep(200 * time.Millisecond)
	}
}

// check fails the test if a producer gave up.
func (l *cikLoad) check(t *testing.T) {
	t.Helper()
	select {
	case err := <-l.errs:
		t.Fatal(err)
	default:
	}
}

// halt stops the producers after their current wave (idempotent).
func (l *cikLoad) halt() {
	l.stop.Store(true)
	l.wg.Wait()
	l.closed.Do(func() { _ = l.w.Close() })
}

// cikSample is the backlog at one moment: events acknowledged by Kafka and
// effects in PostgreSQL.
type cikSample struct {
	at             time.Time
	acked, effects int64
}

// cikSnapshot is the group's committed offsets, read at or before at.
type cikSnapshot struct {
	at      time.Time
	offsets []int64
}

// cikMonitor samples the backlog every 100ms and the group's committed
// offsets every 500ms.
type cikMonitor struct {
	cancel     context.CancelFunc
	done       chan struct{}
	offsetErrs atomic.Int64

	mu      sync.Mutex
	samples []cikSample
	snaps   []cikSnapshot
}

func startCikMonitor(ctx context.Context, db *DB, table, group, topic string, partitions int, load *cikLoad) *cikMonitor {
	mctx, cancel := context.WithCancel(ctx)
	m := &cikMonitor{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			acked := load.acked.Load()
			var n int64
			qctx, qcancel := context.WithTimeout(mctx, 2*time.Second)
			err := db.QueryRow(qctx, `SELECT count(*) FROM `+table).Scan(&n)
			qcancel()
			if err == nil {
				m.mu.Lock()
				m.samples = append(m.samples, cikSample{time.Now(), acked, n})
				m.mu.Unlock()
			}
			if i%5 == 0 {
				offs, err := cikOffsets(mctx, group, topic, partitions)
				// The snapshot's time is taken after the answer: every
				// offset in it was committed before.
				if at := time.Now(); err == nil {
					m.mu.Lock()
					m.snaps = append(m.snaps, cikSnapshot{at, offs})
					m.mu.Unlock()
				} else if mctx.Err() == nil {
					m.offsetErrs.Add(1)
				}
			}
			select {
			case <-mctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

// halt stops the sampling (idempotent).
func (m *cikMonitor) halt() {
	m.cancel()
	<-m.done
}

func (m *cikMonitor) last() cikSample {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) == 0 {
		return cikSample{}
	}
	return m.samples[len(m.samples)-1]
}

// maxBacklog is the largest backlog sampled between from and to.
func (m *cikMonitor) maxBacklog(from, to time.Time) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var most int64
	for _, s := range m.samples {
		if s.at.After(from) && s.at.Before(to) {
			most = max(most, s.acked-s.effects)
		}
	}
	return most
}

// timeline lists a sample per second between from and to, its time
// relative to ref.
func (m *cikMonitor) timeline(from, to, ref time.Time) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var b strings.Builder
	var next time.Time
	for _, s := range m.samples {
		if s.at.Before(from) || s.at.After(to) || s.at.Before(next) {
			continue
		}
		next = s.at.Add(time.Second)
		fmt.Fprintf(&b, " %s %d/%d", cikSince(s.at, ref), s.acked, s.effects)
	}
	return b.String()
}

func (m *cikMonitor) snapshots() []cikSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.snaps)
}

// cikLogs keeps what the inbox instances log at Info and above: when a
// generation started tells when the group recovered, and the warnings say
// what the inbox went through.
type cikLogs struct {
	mu      sync.Mutex
	entries []cikLogEntry
	dropped int
}

type cikLogEntry struct {
	at    time.Time
	inst  string
	level slog.Level
	msg   string
	attrs string
}

const cikGenerationStarted = "consumer group generation started"

// handler returns the slog.Handler of instance inst.
func (l *cikLogs) handler(inst string) slog.Handler { return &cikLogHandler{logs: l, inst: inst} }

func (l *cikLogs) add(e cikLogEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) >= 50000 {
		l.dropped++
		return
	}
	l.entries = append(l.entries, e)
}

// generationAfter returns when the first generation after t started (the
// zero Time: none yet).
func (l *cikLogs) generationAfter(t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.entries {
		if e.msg == cikGenerationStarted && e.at.After(t) {
			return e.at
		}
	}
	return time.Time{}
}

// report summarizes the log: each distinct message (per instance and
// level) with how often it came, when first and last (relative to ref),
// and the attributes it first came with.
func (l *cikLogs) report(ref time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	type key struct {
		inst, msg string
		level     slog.Level
	}
	count := map[key]int{}
	first := map[key]cikLogEntry{}
	last := map[key]time.Time{}
	var keys []key
	for _, e := range l.entries {
		k := key{e.inst, e.msg, e.level}
		if count[k]++; count[k] == 1 {
			keys = append(keys, k)
			first[k] = e
		}
		last[k] = e.at
	}
	var b strings.Builder
	fmt.Fprintf(&b, "inbox log, times relative to the kill (%d entries dropped):\n", l.dropped)
	for _, k := range keys {
		e := first[k]
		line := fmt.Sprintf("%s%s", e.msg, e.attrs)
		if len(line) > 400 {
			line = line[:400] + "…"
		}
		when := cikSince(e.at, ref)
		if count[k] > 1 {
			when += ".." + cikSince(last[k], ref)
		}
		fmt.Fprintf(&b, "  %s %s %s %d× %s\n", when, e.inst, e.level, count[k], line)
	}
	return b.String()
}

// cikMembership is a kafka-go Logger that passes on only the consumer
// group's membership lines (joined as which member, leaving), to l at
// Info: they tell whether a member rejoined with its member id.
func cikMembership(l *slog.Logger) kafka.Logger {
	return kafka.LoggerFunc(func(format string, args ...any) {
		if strings.HasPrefix(format, "Joined group") || strings.HasPrefix(format, "Leaving group") {
			l.Info("kafka-go: " + fmt.Sprintf(format, args...))
		}
	})
}

type cikLogHandler struct {
	logs  *cikLogs
	inst  string
	attrs []slog.Attr
}

func (h *cikLogHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

func (h *cikLogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	add := func(a slog.Attr) bool {
		if a.Key != "consumer" {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	h.logs.add(cikLogEntry{at: r.Time, inst: h.inst, level: r.Level, msg: r.Message, attrs: b.String()})
	return nil
}

func (h *cikLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &cikLogHandler{logs: h.logs, inst: h.inst, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *cikLogHandler) WithGroup(string) slog.Handler { return h }
