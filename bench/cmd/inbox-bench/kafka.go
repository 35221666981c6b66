package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/bench/internal/benchkit"
	"github.com/outbox-relay/outbox-relay/record"
)

// createTopic creates topic (benchkit.CreateTopic) and cleans it up with
// the run's. It waits until every partition's leader answers, so that the
// consumer's first fetches find them.
func (b *bench) createTopic(ctx context.Context, topic string) error {
	b.mu.Lock()
	b.topics = append(b.topics, topic)
	b.mu.Unlock()
	return benchkit.CreateTopic(ctx, b.kafka, topic, benchkit.LeadersAnswer)
}

// waitAssigned waits until group is stable with all partitions of topic
// assigned, so that no record waits for the consumer's start-up.
func (b *bench) waitAssigned(ctx context.Context, group, topic string, alive func() error) error {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	last := "no answer"
	for {
		if err := alive(); err != nil {
			return err
		}
		resp, err := b.kafka.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
		if err != nil {
			last = err.Error()
		} else if len(resp.Groups) == 1 {
			g := resp.Groups[0]
			n := 0
			for _, m := range g.Members {
				for _, t := range m.MemberAssignments.Topics {
					if t.Topic == topic {
						n += len(t.Partitions)
					}
				}
			}
			last = fmt.Sprintf("state %s, %d members, %d of %d partitions assigned", g.GroupState, len(g.Members), n, benchkit.Partitions)
			if g.Error == nil && g.GroupState == "Stable" && n == benchkit.Partitions {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer group %s not ready: %s", group, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Record contents. Event i belongs to aggregate i mod A at version i/A + 1,
// so every aggregate's versions are produced in order, and Murmur2 on the
// key keeps them in one partition.
const (
	aggregateType = "order"
	payloadFormat = `{"order_id":%q,"version":%d,"status":"updated","amount_cents":%d,"currency":"EUR","note":"inbox-bench"}`
)

func eventID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", i) }

func aggregateID(i, aggregates int) string { return fmt.Sprintf("order-%06d", i%aggregates) }

func aggregateVersion(i, aggregates int) int64 { return int64(i/aggregates) + 1 }

// eventRecord builds event i the way the relay publishes an outbox row: key =
// aggregate_id, value = payload, the standard headers (see package record and
// integration/inbox_test.go).
func eventRecord(i, aggregates int, ts time.Time) kafka.Message {
	agg, v := aggregateID(i, aggregates), aggregateVersion(i, aggregates)
	typ := "order.updated"
	if v == 1 {
		typ = "order.created"
	}
	return kafka.Message{
		Key:   []byte(agg),
		Value: fmt.Appendf(nil, payloadFormat, agg, v, 1000+i%9000),
		Headers: []kafka.Header{
			{Key: record.HeaderEventID, Value: []byte(eventID(i))},
			{Key: record.HeaderEventType, Value: []byte(typ)},
			{Key: record.HeaderSchemaVersion, Value: []byte("1")},
			{Key: record.HeaderAggregateType, Value: []byte(aggregateType)},
			{Key: record.HeaderAggregateVersion, Value: []byte(strconv.FormatInt(v, 10))},
		},
		Time: ts,
	}
}

// produced is what the producer did.
type produced struct {
	Start, End time.Time
}

// produce writes events 0 … n-1 to topic in chunks, each stamped with the
// time it is handed to the writer. With rate > 0 the chunks are paced to
// offer that many records per second.
func (b *bench) produce(ctx context.Context, topic string, n, rate int) (produced, error) {
	w := &kafka.Writer{
		Addr: kafka.TCP(b.cfg.Brokers...), Topic: topic, Balancer: &kafka.Murmur2Balancer{},
		RequiredAcks: kafka.RequireAll, BatchSize: 1000, BatchBytes: 1 << 20, BatchTimeout: 2 * time.Millisecond,
		WriteTimeout: 30 * time.Second,
	}
	defer w.Close()
	chunk := 6000
	if rate > 0 {
		chunk = max(1, min(chunk, rate/100)) // every 10 ms or so
	}
	p := produced{Start: time.Now()}
	msgs := make([]kafka.Message, 0, chunk)
	for i := 0; i < n; i += chunk {
		if rate > 0 {
			due := p.Start.Add(time.Duration(float64(i) / float64(rate) * float64(time.Second)))
			select {
			case <-ctx.Done():
				return p, ctx.Err()
			case <-time.After(time.Until(due)):
			}
		}
		now := time.Now()
		msgs = msgs[:0]
		for j := i; j < min(i+chunk, n); j++ {
			msgs = append(msgs, eventRecord(j, b.cfg.Aggregates, now))
		}
		if err := w.WriteMessages(ctx, msgs...); err != nil {
			return p, fmt.Errorf("produce records %d-%d: %w", i, i+len(msgs)-1, err)
		}
	}
	p.End = time.Now()
	return p, nil
}
