//go:build integration

package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestPartitionsAddedWhileStreaming grows a topic from 2 to 6 partitions
// while writers commit events for 40 aggregates. Nothing may be lost, and
// every aggregate's events must stay in version order: on its old
// partition (murmur2 over 2) until the relay switched, then only on its
// new one (murmur2 over 6), never back.
func TestPartitionsAddedWhileStreaming(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions)
	const before, after, aggregates = 2, 6, 40
	env := NewEnv(t, EnvOptions{Partitions: before})
	relay := env.StartRelay("OUTBOX_RELAY_PARTITION_REFRESH=300ms")
	ledger := NewLedger()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wr := env.NewWriter(ledger)
			var own []string
			for i := w; i < aggregates; i += 4 {
				own = append(own, aggName(i))
			}
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := wr.Write(ctx, []string{own[n%len(own)], own[(n+1)%len(own)]}, true); err != nil {
					errs <- fmt.Errorf("writer %d: %w", w, err)
					return
				}
				// wall-clock: paces each writer (a transaction every 2 ms)
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	// wall-clock: load flows before the partitions are added, so the change lands mid-stream
	time.Sleep(1500 * time.Millisecond)
	res, err := kafkaClient().CreatePartitions(ctx, &kafka.CreatePartitionsRequest{
		Topics: []kafka.TopicPartitionsConfig{{Name: env.Topic, Count: after}},
	})
	if err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	if err := res.Errors[env.Topic]; err != nil {
		t.Fatalf("create partitions: %v", err)
	}
	added := ledger.CommittedCount()
	// The relay sees the new count through kafka-go's metadata cache, refreshed every
	// --metadata-ttl (1 s) by a request that must answer within that second, else the
	// stale layout is kept. Alone the switch takes about a second; under make test's
	// concurrent suites it once took over 20 s (the suspect: those refreshes timing out on a
	// loaded broker). The deadline is generous and the time taken is reported.
	addedAt := time.Now()
	if !within(60*time.Second, 50*time.Millisecond, func() bool { return relay.LogContains("routing under the new count") }) {
		t.Fatalf("the relay did not switch to %d partitions within 60s", after)
	}
	t.Logf("the relay switched to %d partitions %s after they were added", after, time.Since(addedAt).Round(time.Millisecond))
	// wall-clock: load flows on under the new partition count before it stops
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	committed := ledger.Committed()

	c := StartConsumer(t, env.Topic, after)
	if !c.WaitFor(committed, 2*time.Minute, time.Second) {
		t.Fatalf("not every event arrived: %s", c.Check(committed, CheckOptions{}))
	}
	rep := c.Check(committed, CheckOptions{})
	if len(rep.Lost) > 0 || len(rep.Unexpected) > 0 {
		t.Fatalf("delivery: %s", rep)
	}
	for cat := range rep.Problems {
		if cat != "partition" { // checked below against both counts
			t.Fatalf("delivery: %s", rep)
		}
	}

	// Per aggregate, in version order: partition old* then new*, offsets
	// increasing within each.
	type occ struct {
		version   int64
		partition int
		offset    int64
	}
	byAgg := map[string][]occ{}
	seen := map[string]bool{}
	moved, onNew := 0, 0
	for _, rec := range c.Records() {
		ev, ok := committed[rec.EventID()]
		if !ok || seen[ev.ID] {
			continue
		}
		seen[ev.ID] = true
		byAgg[ev.AggregateID] = append(byAgg[ev.AggregateID], occ{ev.Version, rec.Partition, rec.Offset})
	}
	for agg, occs := range byAgg {
		oldP, newP := KafkaPartition([]byte(agg), before), KafkaPartition([]byte(agg), after)
		sort.Slice(occs, func(i, j int) bool { return occs[i].version < occs[j].version })
		switched := false
		var last occ
		for i, o := range occs {
			switch {
			case o.partition != oldP && o.partition != newP:
				t.Fatalf("%s v%d on partition %d: neither its partition of %d (%d) nor of %d (%d)", agg, o.version, o.partition, before, oldP, after, newP)
			case o.partition == newP && newP != oldP:
				if !switched {
					moved++
				}
				switched = true
				onNew++
			case switched: // back on the old partition after the switch
				t.Fatalf("%s v%d on old partition %d after v%d went to the new %d", agg, o.version, oldP, last.version, newP)
			}
			if i > 0 && o.partition == last.partition && o.offset < last.offset {
				t.Fatalf("%s v%d at offset %d before v%d at %d on partition %d", agg, o.version, o.offset, last.version, last.offset, o.partition)
			}
			last = o
		}
	}
	if moved == 0 {
		t.Fatalf("no aggregate moved to a new partition: the switch was not exercised")
	}
	lines := relay.LogLines("routing under the new count", 2)
	if len(lines) != 1 || !strings.Contains(lines[0], fmt.Sprintf(`"old_partitions":%d`, before)) ||
		!strings.Contains(lines[0], fmt.Sprintf(`"new_partitions":%d`, after)) {
		t.Fatalf("want one switch warning with the counts, got %v", lines)
	}
	t.Logf("TestPartitionsAddedWhileStreaming: %d events (%d before the partitions were added), %d duplicates; "+
		"%d of %d aggregates moved, %d events on their new partition; order held",
		len(committed), added, rep.Duplicates, moved, len(byAgg), onNew)
}
