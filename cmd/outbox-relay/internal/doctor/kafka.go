package doctor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// KafkaTarget names what the relay uses in Kafka.
type KafkaTarget struct {
	Brokers []string
	Topics  []string
	// DedupeRetention is how long consumers remember event ids; 0 skips
	// the retention check.
	DedupeRetention time.Duration
	// Client returns a client on the relay's one Kafka configuration
	// (brokers, TLS, SASL) and the function that closes its idle
	// connections.
	Client func() (*kafka.Client, func())
}

// CheckKafka checks that a broker answers, and per topic its partitions,
// replication factor, min.insync.replicas (the relay writes with acks=all)
// and retention.ms against the consumers' dedupe retention.
func CheckKafka(ctx context.Context, t KafkaTarget, r *Report) {
	c, closeIdle := t.Client()
	defer closeIdle()
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := c.Metadata(mctx, &kafka.MetadataRequest{Topics: t.Topics})
	if err != nil {
		r.add("kafka", Fail, fmt.Sprintf("brokers %v unreachable: %v", t.Brokers, err),
			"check --kafka-brokers, the network path and the listener the brokers advertise")
		return
	}
	r.add("kafka", Pass, fmt.Sprintf("%d broker(s) answer", len(md.Brokers)), "")
	if len(t.Topics) == 0 {
		r.add("topics", Warn, "no topic to check (no events in the outbox yet)", "name them with --topics")
		return
	}
	for _, tp := range md.Topics {
		name := "topic " + tp.Name
		if tp.Error != nil {
			r.add(name, Warn, "missing: "+tp.Error.Error(),
				"create it (kafka-topics.sh --create --topic "+tp.Name+" --replication-factor 3), or run the relay with --create-topics")
			continue
		}
		rf := 0
		if len(tp.Partitions) > 0 {
			rf = len(tp.Partitions[0].Replicas)
		}
		cfg, err := topicConfig(ctx, c, tp.Name)
		if err != nil {
			r.add(name, Warn, fmt.Sprintf("%d partitions, replication factor %d; configs unreadable: %v", len(tp.Partitions), rf, err),
				"grant DescribeConfigs on the topic")
			continue
		}
		minISR, _ := strconv.Atoi(cfg["min.insync.replicas"])
		detail := fmt.Sprintf("%d partitions, replication factor %d, min.insync.replicas %d", len(tp.Partitions), rf, minISR)
		fix := "kafka-configs.sh --alter --entity-type topics --entity-name " + tp.Name + " --add-config min.insync.replicas=2"
		switch {
		case minISR > rf:
			r.add(name, Fail, detail+": every acks=all write fails (NOT_ENOUGH_REPLICAS)", "lower min.insync.replicas to at most the replication factor, or add replicas")
		case rf > 1 && minISR <= 1:
			r.add(name, Warn, detail+": with acks=all a write acknowledged by one replica is lost if that broker fails", fix)
		case rf == 1:
			r.add(name, Warn, detail+": no redundancy, a broker loss loses acknowledged events", "use replication factor 3 with min.insync.replicas=2")
		default:
			r.add(name, Pass, detail, "")
		}
		if t.DedupeRetention > 0 {
			ms, err := strconv.ParseInt(cfg["retention.ms"], 10, 64)
			switch {
			case err != nil:
			case ms < 0 || time.Duration(ms)*time.Millisecond > t.DedupeRetention:
				r.add(name+" retention", Warn,
					fmt.Sprintf("retention.ms %d exceeds the consumers' dedupe retention %s: a consumer re-reading old records sees duplicates it no longer recognises", ms, t.DedupeRetention),
					"keep consumer dedupe state at least as long as retention.ms, or lower retention.ms")
			default:
				r.add(name+" retention", Pass, fmt.Sprintf("retention.ms %d within the dedupe retention %s", ms, t.DedupeRetention), "")
			}
		}
	}
}

func topicConfig(ctx context.Context, c *kafka.Client, topic string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: []string{"min.insync.replicas", "retention.ms"},
	}}})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, res := range resp.Resources {
		if res.Error != nil {
			return nil, res.Error
		}
		for _, e := range res.ConfigEntries {
			out[e.ConfigName] = e.ConfigValue
		}
	}
	return out, nil
}
