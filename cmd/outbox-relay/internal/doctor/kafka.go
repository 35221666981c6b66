package doctor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// KafkaTarget names what the relay uses in Kafka.
type KafkaTarget struct {
	Brokers []string
	Topics  []string
	// DedupeRetention is how long consumers remember event ids; 0 skips
	// the retention check.
	DedupeRetention time.Duration
	// Idempotent is set when the relay writes with the idempotent producer
	// (relay.Config.Publish.NoIdempotence unset, --idempotent): then its
	// principal must be allowed InitProducerId, which doctor tries.
	Idempotent bool
	// Client returns a client on the relay's one Kafka configuration
	// (brokers, TLS, SASL) and the function that closes its idle
	// connections.
	Client func() (*kafka.Client, func())
}

// topicConfigNames are the topic configs the checks read, in one
// DescribeConfigs request per topic.
var topicConfigNames = []string{"min.insync.replicas", "unclean.leader.election.enable", "retention.ms", "cleanup.policy"}

// CheckKafka checks that a broker answers, that the relay's principal may
// write idempotently (or says that it does not), and per topic its
// partitions, replication factor, min.insync.replicas (the relay writes
// with acks=all), unclean.leader.election.enable and retention.ms against
// the consumers' dedupe retention.
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
	var pid kafkaproduce.ProducerID
	if t.Idempotent {
		tr := c.Transport
		if tr == nil {
			tr = kafka.DefaultTransport
		}
		pid, err = kafkaproduce.InitProducerID(ctx, tr, c.Addr)
	}
	evalIdempotence(t.Idempotent, pid, err, r)
	if len(t.Topics) == 0 {
		r.add("topics", Warn, "no topic to check (no events in the outbox yet)", "name them with --topics")
		return
	}
	for _, tp := range md.Topics {
		f := topicFacts{name: tp.Name, partitions: len(tp.Partitions), missing: tp.Error}
		if len(tp.Partitions) > 0 {
			f.replicas = len(tp.Partitions[0].Replicas)
		}
		if f.missing == nil {
			f.configs, f.configErr = topicConfig(ctx, c, tp.Name)
		}
		evalTopic(f, t.DedupeRetention, r)
	}
}

// topicFacts is what the topic checks read of one topic.
type topicFacts struct {
	name string
	// missing is the topic's error in the metadata (it does not exist,
	// or the principal may not describe it); nothing else is set then.
	missing error
	// replicas is the replication factor (of partition 0).
	partitions, replicas int
	// configs holds topicConfigNames as DescribeConfigs returned them,
	// unless reading them failed (configErr).
	configs   map[string]string
	configErr error
	// createFlags are the kafka-topics.sh flags, besides the replication,
	// that re-create the topic as it must be (the positions topic's);
	// empty for an outbox topic.
	createFlags string
}

// evalTopic adds the findings of one topic. A topic should have 3
// replicas and min.insync.replicas=2: the relay writes with acks=all, so
// an acknowledged event is then on 2 brokers at least (it survives the
// loss of any one), and one broker may be down without stopping writes.
// Fewer replicas trade one of the two away. An unclean leader election
// trades acknowledged events for availability, which is never the relay's
// choice.
func evalTopic(f topicFacts, dedupe time.Duration, r *Report) {
	name := "topic " + f.name
	switch {
	case errors.Is(f.missing, kafka.TopicAuthorizationFailed):
		r.add(name, Fail, "the relay's principal may not describe it: "+f.missing.Error(), acl(f.name, "Describe", "Write"))
		return
	case f.missing != nil:
		r.add(name, Warn, "missing: "+f.missing.Error(),
			"create it (kafka-topics.sh --create --topic "+f.name+" --replication-factor 3 --config min.insync.replicas=2), or run the relay with --create-topics; "+
				"if it exists, the relay's principal may not describe it: "+acl(f.name, "Describe", "Write"))
		return
	case f.configErr != nil:
		r.add(name, Warn, fmt.Sprintf("%d partitions, replication factor %d; configs unreadable: %v", f.partitions, f.replicas, f.configErr),
			acl(f.name, "DescribeConfigs"))
		return
	}
	rf := f.replicas
	minISR, _ := strconv.Atoi(f.configs["min.insync.replicas"])
	unclean := f.configs["unclean.leader.election.enable"] == "true"
	detail := fmt.Sprintf("%d partitions, replication factor %d, min.insync.replicas %d", f.partitions, rf, minISR)
	alter := "kafka-configs.sh --alter --entity-type topics --entity-name " + f.name + " --add-config "
	addReplicas := "add replicas with kafka-reassign-partitions.sh (3 brokers per partition), or re-create the topic with kafka-topics.sh --create --topic " +
		f.name + f.createFlags + " --replication-factor 3 --config min.insync.replicas=2"
	passed := true // no finding below: one PASS line
	find := func(l Level, detail, fix string) {
		passed = false
		r.add(name, l, detail, fix)
	}
	switch {
	case minISR > rf:
		find(Fail, detail+": every acks=all write fails (NOT_ENOUGH_REPLICAS)",
			fmt.Sprintf("lower min.insync.replicas to at most the replication factor (%smin.insync.replicas=%d), or %s", alter, max(1, min(2, rf)), addReplicas))
	case rf == 1:
		find(Warn, detail+": no redundancy: a broker loss loses acknowledged events and stops writes", addReplicas)
	case rf == 2:
		find(Warn, detail+": fewer than 3 replicas: either one broker down stops every write (min.insync.replicas 2) "+
			"or a broker loss can lose acknowledged events (min.insync.replicas 1)", addReplicas)
	}
	if rf > 1 && minISR < 2 {
		find(Warn, detail+": with acks=all a write acknowledged by one replica alone is lost if that broker fails", alter+"min.insync.replicas=2")
	}
	if unclean {
		find(Warn, "unclean.leader.election.enable=true: a replica that missed acknowledged events may become leader and truncate them; "+
			"the idempotent producer then gets OUT_OF_ORDER_SEQUENCE_NUMBER", alter+"unclean.leader.election.enable=false")
	}
	if passed {
		r.add(name, Pass, detail+", unclean.leader.election.enable false", "")
	}
	if dedupe > 0 {
		ms, err := strconv.ParseInt(f.configs["retention.ms"], 10, 64)
		switch {
		case err != nil:
		case ms < 0 || time.Duration(ms)*time.Millisecond > dedupe:
			r.add(name+" retention", Warn,
				fmt.Sprintf("retention.ms %d exceeds the consumers' dedupe retention %s: a consumer re-reading old records sees duplicates it no longer recognises", ms, dedupe),
				"keep consumer dedupe state at least as long as retention.ms, or lower retention.ms")
		default:
			r.add(name+" retention", Pass, fmt.Sprintf("retention.ms %d within the dedupe retention %s", ms, dedupe), "")
		}
	}
}

// acl is the fix that grants the relay's principal ops on topic.
func acl(topic string, ops ...string) string {
	cmd := "kafka-acls.sh --add --allow-principal User:<relay's principal>"
	for _, op := range ops {
		cmd += " --operation " + op
	}
	return "grant " + strings.Join(ops, " and ") + " on the topic: " + cmd + " --topic " + topic
}

func topicConfig(ctx context.Context, c *kafka.Client, topic string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: topic, ConfigNames: topicConfigNames,
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
