//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestHarnessMurmur2 checks the test's own murmur2 port against the Java
// client's published test vectors and against kafka-go's Murmur2Balancer.
func TestHarnessMurmur2(t *testing.T) {
	inSuites(t, parallel, stack)
	// From Kafka's UtilsTest.testMurmur2.
	vectors := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range vectors {
		if got := Murmur2([]byte(in)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", in, got, want)
		}
	}
	bal := kafka.Murmur2Balancer{}
	for _, n := range []int{1, 3, 6, 7, 12} {
		parts := make([]int, n)
		for i := range parts {
			parts[i] = i
		}
		for i := 0; i < 2000; i++ {
			key := fmt.Sprintf("agg-%d", i)
			if i%7 == 0 {
				key = fmt.Sprintf("%x-order-%d", i*2654435761, i)
			}
			want := bal.Balance(kafka.Message{Key: []byte(key)}, parts...)
			if got := KafkaPartition([]byte(key), n); got != want {
				t.Fatalf("partition(%q, %d) = %d, kafka-go Murmur2Balancer says %d", key, n, got, want)
			}
		}
	}
}

// TestHarnessChecker produces records the way the relay must (murmur2 key
// partitioning, headers) with kafka-go and runs them through the checker,
// including injected duplicates, an inversion, a loss and a stray record.
func TestHarnessChecker(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoMigrate: true})
	w := &kafka.Writer{
		Addr:         kafka.TCP(kafkaBrokers...),
		Topic:        env.Topic,
		Balancer:     kafka.Murmur2Balancer{},
		BatchTimeout: 5 * time.Millisecond,
		RequiredAcks: kafka.RequireAll,
	}
	defer w.Close()
	wr := &Writer{AggregateType: env.AggType, EventType: "OrderUpdated", SchemaVersion: 3, Ledger: NewLedger()}
	var evs []Event
	for v := 0; v < 5; v++ {
		for a := 0; a < 40; a++ {
			evs = append(evs, wr.NextEvents([]string{fmt.Sprintf("agg-%d", a)})...)
		}
	}
	toMsg := func(e Event) kafka.Message {
		return kafka.Message{
			Key:   []byte(e.AggregateID),
			Value: []byte(fmt.Sprintf(`{"aggregate_id":%q,"version":%d}`, e.AggregateID, e.Version)),
			Headers: []kafka.Header{
				{Key: "event_id", Value: []byte(e.ID)},
				{Key: "event_type", Value: []byte(e.EventType)},
				{Key: "schema_version", Value: []byte(fmt.Sprint(e.SchemaVersion))},
				{Key: "aggregate_type", Value: []byte(e.AggregateType)},
				{Key: "aggregate_version", Value: []byte(fmt.Sprint(e.Version))},
				{Key: "trace_id", Value: []byte(e.TraceID)},
			},
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	now := time.Now()
	var msgs []kafka.Message
	expected := map[string]Event{}
	for _, e := range evs {
		e.CommitTime = now
		expected[e.ID] = e
		msgs = append(msgs, toMsg(e))
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		t.Fatalf("produce: %v", err)
	}
	c := StartConsumer(t, env.Topic, env.Partitions)
	if !c.WaitFor(expected, 30*time.Second, 0) {
		t.Fatalf("checker did not see all produced records: %s", c.Check(expected, CheckOptions{}))
	}
	rep := c.Check(expected, CheckOptions{TimestampSkew: 5 * time.Second})
	t.Logf("clean run: %s", rep)
	RequireOK(t, rep)

	// Inject: duplicate of an early event of agg-1 after a later one (a
	// duplicate, not an inversion), a true inversion for agg-2 via a new id
	// with an older version, a stray id, and a lost id in expected.
	var agg1First Event
	for _, e := range evs {
		if e.AggregateID == "agg-1" {
			agg1First = e
			break
		}
	}
	old := wr.NextEvents([]string{"agg-2"})[0]
	old.Version = 0 // older than everything already delivered for agg-2
	old.CommitTime = now
	stray := wr.NextEvents([]string{"agg-3"})[0]
	lost := wr.NextEvents([]string{"agg-4"})[0]
	lost.CommitTime = now
	if err := w.WriteMessages(ctx, toMsg(agg1First), toMsg(old), toMsg(stray)); err != nil {
		t.Fatalf("produce: %v", err)
	}
	expected[old.ID] = old
	expected[lost.ID] = lost
	if !c.WaitCount(len(evs)+3, 30*time.Second) {
		t.Fatalf("injected records not read")
	}
	rep = c.Check(expected, CheckOptions{Forbidden: map[string]Event{stray.ID: stray}})
	t.Logf("injected run: %s", rep)
	if rep.Duplicates != 1 || rep.Inversions != 1 || len(rep.Lost) != 1 || rep.Lost[0] != lost.ID ||
		len(rep.Forbidden) != 1 || len(rep.Unexpected) != 0 {
		t.Fatalf("checker did not report the injected faults: %s", rep)
	}
}

// TestHarnessTempCluster checks the throwaway-cluster helper.
func TestHarnessTempCluster(t *testing.T) {
	inSuites(t, parallel, stack)
	c := StartTempCluster(t, "wal_level=replica")
	c.Exec(t, "create table x (id int)")
}
