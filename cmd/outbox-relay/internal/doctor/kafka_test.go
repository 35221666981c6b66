package doctor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// goodTopic is a topic as recommended: 3 replicas, min.insync.replicas=2,
// no unclean elections.
func goodTopic() topicFacts {
	return topicFacts{name: "orders", partitions: 6, replicas: 3,
		configs: map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false", "retention.ms": "604800000"}}
}

func topicReport(f topicFacts, dedupe time.Duration) *Report {
	r := &Report{}
	evalTopic(f, dedupe, r)
	return r
}

func TestTopicRecommended(t *testing.T) {
	expect(t, topicReport(goodTopic(), 0),
		[]string{"PASS 6 partitions, replication factor 3, min.insync.replicas 2, unclean.leader.election.enable false"}, Warn, Fail)
	// More replicas and a higher min.insync.replicas are fine too.
	f := goodTopic()
	f.replicas, f.configs["min.insync.replicas"] = 5, "3"
	expect(t, topicReport(f, 0), []string{"PASS replication factor 5, min.insync.replicas 3"}, Warn, Fail)
}

func TestTopicReplication(t *testing.T) {
	reassign := "kafka-reassign-partitions.sh"
	recreate := "kafka-topics.sh --create --topic orders --replication-factor 3 --config min.insync.replicas=2"
	alterISR := "kafka-configs.sh --alter --entity-type topics --entity-name orders --add-config min.insync.replicas=2"
	for _, c := range []struct {
		name         string
		rf, minISR   int
		want, forbid []string
	}{
		{"rf 1", 1, 1, []string{"WARN replication factor 1, min.insync.replicas 1: no redundancy | " + reassign, "WARN no redundancy | " + recreate}, nil},
		{"rf 2 isr 2", 2, 2, []string{"WARN replication factor 2, min.insync.replicas 2: fewer than 3 replicas: either one broker down stops every write | " + recreate}, nil},
		{"rf 2 isr 1", 2, 1, []string{"WARN replication factor 2, min.insync.replicas 1: fewer than 3 replicas | " + reassign,
			"WARN acknowledged by one replica alone is lost | " + alterISR}, nil},
		{"rf 3 isr 1", 3, 1, []string{"WARN min.insync.replicas 1: with acks=all a write acknowledged by one replica alone | " + alterISR}, []string{"fewer than 3"}},
		{"isr above rf", 1, 2, []string{"FAIL every acks=all write fails (NOT_ENOUGH_REPLICAS) | lower min.insync.replicas to at most the replication factor (kafka-configs.sh --alter --entity-type topics --entity-name orders --add-config min.insync.replicas=1)"},
			[]string{"no redundancy"}},
		{"isr above rf 2", 2, 3, []string{"FAIL NOT_ENOUGH_REPLICAS | min.insync.replicas=2), or add replicas"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := goodTopic()
			f.replicas, f.configs["min.insync.replicas"] = c.rf, strconv.Itoa(c.minISR)
			r := topicReport(f, 0)
			expect(t, r, c.want)
			for _, l := range lines(r) {
				if l[:4] == "PASS" {
					t.Errorf("a pass beside the warnings: %s", l)
				}
				for _, no := range c.forbid {
					if strings.Contains(l, no) {
						t.Errorf("finding mentions %q: %s", no, l)
					}
				}
			}
		})
	}
}

func TestTopicUncleanElection(t *testing.T) {
	f := goodTopic()
	f.configs["unclean.leader.election.enable"] = "true"
	r := topicReport(f, 0)
	expect(t, r, []string{"WARN unclean.leader.election.enable=true: a replica that missed acknowledged events may become leader and truncate them; " +
		"the idempotent producer then gets OUT_OF_ORDER_SEQUENCE_NUMBER | " +
		"kafka-configs.sh --alter --entity-type topics --entity-name orders --add-config unclean.leader.election.enable=false"}, Fail)
	if len(r.Findings) != 1 {
		t.Errorf("findings %q, want the warning alone", lines(r))
	}
	// Combined with a replication warning, each has its own line and fix.
	f.replicas = 2
	expect(t, topicReport(f, 0), []string{"WARN replication factor 2", "WARN unclean.leader.election.enable=true"}, Fail)
}

func TestTopicUnreadable(t *testing.T) {
	f := topicFacts{name: "orders", missing: kafka.UnknownTopicOrPartition}
	expect(t, topicReport(f, time.Hour), []string{"WARN missing: | kafka-topics.sh --create --topic orders --replication-factor 3 --config min.insync.replicas=2), or run the relay with --create-topics; " +
		"if it exists, the relay's principal may not describe it: grant Describe and Write on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Describe --operation Write --topic orders"}, Fail, Pass)
	f.missing = kafka.TopicAuthorizationFailed
	expect(t, topicReport(f, time.Hour), []string{"FAIL the relay's principal may not describe it | grant Describe and Write on the topic: kafka-acls.sh"}, Warn, Pass)
	f = topicFacts{name: "orders", partitions: 3, replicas: 3, configErr: kafka.TopicAuthorizationFailed}
	expect(t, topicReport(f, time.Hour), []string{"WARN 3 partitions, replication factor 3; configs unreadable | grant DescribeConfigs on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation DescribeConfigs --topic orders"}, Fail, Pass)
}

func TestTopicRetention(t *testing.T) {
	expect(t, topicReport(goodTopic(), 30*24*time.Hour), []string{"PASS retention.ms 604800000 within the dedupe retention 720h0m0s"}, Warn, Fail)
	expect(t, topicReport(goodTopic(), time.Hour), []string{"WARN retention.ms 604800000 exceeds the consumers' dedupe retention 1h0m0s"}, Fail)
	f := goodTopic()
	f.configs["retention.ms"] = "-1"
	expect(t, topicReport(f, time.Hour), []string{"WARN retention.ms -1 exceeds"}, Fail)
	// No dedupe retention given: no retention finding.
	if r := topicReport(goodTopic(), 0); len(r.Findings) != 1 {
		t.Errorf("findings %q, want the topic's pass alone", lines(r))
	}
}

func TestIdempotence(t *testing.T) {
	report := func(on bool, pid kafkaproduce.ProducerID, err error) *Report {
		r := &Report{}
		evalIdempotence(on, pid, err, r)
		return r
	}
	expect(t, report(true, kafkaproduce.ProducerID{ID: 4001}, nil), []string{"PASS producer id 4001, epoch 0: the relay's principal may write idempotently"}, Warn, Fail)
	denied := "FAIL the relay's principal may not write idempotently | grant IDEMPOTENT_WRITE on the cluster (Kafka < 3.0) or WRITE on the outbox topics (3.0+), " +
		"or run with --idempotent=false (retried writes may then be duplicated)"
	for _, err := range []error{kafka.ClusterAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed} {
		expect(t, report(true, kafkaproduce.ProducerID{}, wrapInit(err)), []string{denied, "FAIL " + err.Error()}, Warn, Pass)
	}
	expect(t, report(true, kafkaproduce.ProducerID{}, wrapInit(kafka.GroupCoordinatorNotAvailable)),
		[]string{"WARN cannot check that the relay's principal may write idempotently: InitProducerId: [15] | --idempotent=false"}, Fail, Pass)
	expect(t, report(true, kafkaproduce.ProducerID{}, errors.New("dial tcp: connection refused")), []string{"WARN connection refused"}, Fail, Pass)
	expect(t, report(false, kafkaproduce.ProducerID{}, nil), []string{"WARN off (--idempotent=false): writes are not idempotent, a retried produce request may store its batch twice | run with --idempotent"}, Fail, Pass)
}

func wrapInit(err error) error { return fmt.Errorf("InitProducerId: %w", err) }
