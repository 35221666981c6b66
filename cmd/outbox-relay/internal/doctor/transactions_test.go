package doctor

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// brokersWith is n brokers (ids 1..n) with the given transaction log
// settings, the default transaction.max.timeout.ms (15 min) and
// default.replication.factor 3.
func brokersWith(n, rf, isr int) []brokerSetting {
	s := make([]brokerSetting, n)
	for i := range s {
		s[i] = brokerSetting{broker: i + 1, replicationFactor: rf, minISR: isr, maxTimeout: 15 * time.Minute, defaultRF: 3}
	}
	return s
}

func TestTransactionLog(t *testing.T) {
	recommended := "set transaction.state.log.replication.factor=3 and transaction.state.log.min.isr=2 in every broker's server.properties"
	for _, c := range []struct {
		name        string
		settings    []brokerSetting
		brokers     int
		coordinator bool
		want        string
		forbid      []Level
	}{
		{"recommended", brokersWith(3, 3, 2), 3, true,
			"PASS transaction.state.log.replication.factor 3, transaction.state.log.min.isr 2", []Level{Warn, Fail}},
		{"more replicas", brokersWith(5, 5, 3), 5, true, "PASS replication.factor 5", []Level{Warn, Fail}},
		{"single broker", brokersWith(1, 1, 1), 1, true,
			"WARN a single broker (transaction.state.log.replication.factor 1, transaction.state.log.min.isr 1): " +
				"the transaction log, the positions topic and the events have one copy each | for production, run 3 brokers or more and " + recommended,
			[]Level{Pass, Fail}},
		{"rf 2", brokersWith(3, 2, 2), 3, true,
			"WARN replication.factor 2, transaction.state.log.min.isr 2: fewer than 3 copies of the transaction state | " + recommended, []Level{Pass, Fail}},
		{"rf 1 on three brokers", brokersWith(3, 1, 1), 3, true, "WARN fewer than 3 copies | kafka-reassign-partitions.sh", []Level{Pass, Fail}},
		{"min.isr 1", brokersWith(3, 3, 1), 3, true,
			"WARN transaction.state.log.min.isr 1: a commit written to one replica of the transaction log alone is lost | " + recommended, []Level{Pass, Fail}},
		{"min.isr above rf", brokersWith(3, 2, 3), 3, true,
			"FAIL min.isr above the replication factor: the coordinators cannot write __transaction_state | lower transaction.state.log.min.isr to at most 2",
			[]Level{Pass, Warn}},
		// Kafka's default replication factor 3 on one broker: the first
		// FindCoordinator cannot create __transaction_state.
		{"rf above brokers", brokersWith(1, 3, 2), 1, false,
			"FAIL more replicas than the 1 broker(s), so __transaction_state cannot be created | set transaction.state.log.replication.factor=1",
			[]Level{Pass, Warn}},
		// ... unless it exists already (created when more brokers ran).
		{"rf above brokers, log exists", brokersWith(2, 3, 2), 2, true, "PASS replication.factor 3", []Level{Warn, Fail}},
		{"brokers differ", append(brokersWith(2, 3, 2), brokerSetting{broker: 3, replicationFactor: 2, minISR: 2, maxTimeout: time.Minute}), 3, true,
			"WARN replication.factor 2, transaction.state.log.min.isr 2 (the lowest: the brokers differ)", []Level{Pass, Fail}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{}
			evalTransactionLog(c.settings, c.brokers, c.coordinator, r)
			if len(r.Findings) != 1 {
				t.Errorf("findings %q, want one", lines(r))
			}
			expect(t, r, []string{c.want}, c.forbid...)
		})
	}
}

func TestTransactionTimeout(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings []brokerSetting
		timeout  time.Duration
		want     string
	}{
		{"default", brokersWith(3, 3, 2), time.Minute, "PASS --transaction-timeout 1m0s within the brokers' transaction.max.timeout.ms 900000 (15m0s)"},
		{"equal", brokersWith(1, 1, 1), 15 * time.Minute, "PASS --transaction-timeout 15m0s within"},
		{"above", func() []brokerSetting {
			s := brokersWith(1, 1, 1)
			s[0].maxTimeout = 30 * time.Second
			return s
		}(), time.Minute, "FAIL --transaction-timeout 1m0s exceeds the brokers' transaction.max.timeout.ms 30000 (30s): " +
			"the coordinator refuses the relay's InitProducerId with INVALID_TRANSACTION_TIMEOUT | " +
			"lower --transaction-timeout to 30s or less, or raise transaction.max.timeout.ms on every broker"},
		// Any broker may become the coordinator: the lowest counts, named.
		{"one broker lower", func() []brokerSetting {
			s := brokersWith(3, 3, 2)
			s[1].maxTimeout = 45 * time.Second
			return s
		}(), time.Minute, "FAIL exceeds the brokers' transaction.max.timeout.ms 45000 (45s) on broker 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{}
			evalTransactionTimeout(c.settings, c.timeout, r)
			if len(r.Findings) != 1 {
				t.Errorf("findings %q, want one", lines(r))
			}
			expect(t, r, []string{c.want})
		})
	}
}

func TestTransactionSettingsUnreadable(t *testing.T) {
	r := &Report{}
	evalUnreadableSettings(fmt.Errorf("DescribeConfigs broker 1: %w", kafka.ClusterAuthorizationFailed), r)
	expect(t, r, []string{"WARN cannot read the brokers' transaction settings: DescribeConfigs broker 1 | grant DescribeConfigs on the cluster " +
		"(kafka-acls.sh --add --allow-principal User:<relay's principal> --operation DescribeConfigs --cluster), or check " +
		"transaction.state.log.replication.factor (3), transaction.state.log.min.isr (2) and transaction.max.timeout.ms"}, Pass, Fail)
	r = &Report{}
	evalUnreadableSettings(errors.New("i/o timeout"), r)
	expect(t, r, []string{"WARN i/o timeout | check transaction.state.log.replication.factor (3)"}, Pass, Fail)
	if f := r.Findings[0].Fix; f[:5] == "grant" {
		t.Errorf("a timeout's fix names a grant: %s", f)
	}
}

func TestTransactionalID(t *testing.T) {
	const id = "outbox-relay-orders"
	grant := "grant Write and Describe on the transactional id: kafka-acls.sh --add --allow-principal User:<relay's principal> " +
		"--operation Write --operation Describe --transactional-id outbox-relay-orders"
	allowed := map[string]error{"__outbox_relay_positions": nil, "orders": nil}
	for _, c := range []struct {
		name   string
		facts  transactionalIDFacts
		want   []string
		forbid []Level
	}{
		{"allowed", transactionalIDFacts{id: id, coordinator: 2, writes: allowed},
			[]string{`PASS "outbox-relay-orders": broker 2 coordinates it; the relay's principal may describe and write it`,
				"PASS transactional writes: the relay's principal may write 2 topic(s) in a transaction: __outbox_relay_positions, orders"},
			[]Level{Warn, Fail}},
		{"no describe", transactionalIDFacts{id: id, coordinator: -1, coordErr: fmt.Errorf("FindCoordinator: %w", kafka.TransactionalIDAuthorizationFailed)},
			[]string{`FAIL "outbox-relay-orders": the relay's principal may not describe it (FindCoordinator: TRANSACTIONAL_ID_AUTHORIZATION_FAILED) | ` + grant +
				" (or one ACL for every slot's relay: --resource-pattern-type prefixed --transactional-id outbox-relay-)"},
			[]Level{Pass, Warn}},
		{"no write", transactionalIDFacts{id: id, coordinator: 1, writes: map[string]error{
			"__outbox_relay_positions": kafka.TransactionalIDAuthorizationFailed, "orders": kafka.TransactionalIDAuthorizationFailed}},
			[]string{`FAIL "outbox-relay-orders": the relay's principal may not write it (AddPartitionsToTxn: TRANSACTIONAL_ID_AUTHORIZATION_FAILED): ` +
				"its InitProducerId and every transaction would be refused | " + grant},
			[]Level{Pass, Warn}},
		{"a topic denied", transactionalIDFacts{id: id, coordinator: 1, writes: map[string]error{"__outbox_relay_positions": kafka.TopicAuthorizationFailed, "orders": nil}},
			[]string{`PASS "outbox-relay-orders": broker 1`,
				"FAIL transactional writes: the relay's principal may not write __outbox_relay_positions in a transaction (TOPIC_AUTHORIZATION_FAILED) | " +
					"grant Write on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Write --topic __outbox_relay_positions"},
			[]Level{Warn}},
		{"two topics denied", transactionalIDFacts{id: id, coordinator: 1, writes: map[string]error{"b": kafka.TopicAuthorizationFailed, "a": kafka.TopicAuthorizationFailed}},
			[]string{"FAIL may not write a, b in a transaction | --operation Write --topic a; grant Write on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Write --topic b"},
			[]Level{Warn}},
		{"odd answer", transactionalIDFacts{id: id, coordinator: 1, writes: map[string]error{"orders": kafka.InvalidRequest}},
			[]string{"WARN transactional writes: cannot check that the relay's principal may write orders ("}, []Level{Fail}},
		{"probe failed", transactionalIDFacts{id: id, coordinator: 1, writeErr: errors.New("AddPartitionsToTxn: i/o timeout")},
			[]string{`WARN "outbox-relay-orders": cannot check that the relay's principal may write it: AddPartitionsToTxn: i/o timeout | check the brokers' logs; the relay needs Write and Describe on it`},
			[]Level{Pass, Fail}},
		{"no coordinator", transactionalIDFacts{id: id, coordinator: -1, coordErr: fmt.Errorf("FindCoordinator: %w", kafka.GroupCoordinatorNotAvailable), writes: allowed},
			[]string{`PASS "outbox-relay-orders": the relay's principal may write it`,
				`FAIL transaction coordinator: no coordinator for "outbox-relay-orders": FindCoordinator: | transaction.state.log.replication.factor must not exceed the running brokers`,
				"PASS transactional writes"},
			[]Level{Warn}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Report{}
			evalTransactionalID(c.facts, r)
			expect(t, r, c.want, c.forbid...)
		})
	}
}

// TestWriteVerdict: every AddPartitionsToTxn answer the broker gives only
// after its authorization checks reads as "may write".
func TestWriteVerdict(t *testing.T) {
	for _, err := range []error{nil, kafka.InvalidProducerIDMapping, kafkaproduce.ErrOperationNotAttempted, kafka.UnknownTopicOrPartition,
		kafka.NotCoordinatorForGroup, kafka.GroupCoordinatorNotAvailable, kafka.GroupLoadInProgress, kafka.ConcurrentTransactions,
		kafka.InvalidProducerEpoch, kafka.ProducerFenced, fmt.Errorf("%w: message", kafka.InvalidProducerIDMapping)} {
		if v := writeVerdict(err); v != nil {
			t.Errorf("writeVerdict(%v) = %v, want nil", err, v)
		}
	}
	for _, err := range []error{kafka.TopicAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed, kafka.InvalidRequest} {
		if v := writeVerdict(err); !errors.Is(v, err) {
			t.Errorf("writeVerdict(%v) = %v, want it kept", err, v)
		}
	}
}

func goodPositions() positionsFacts {
	return positionsFacts{topic: topicFacts{name: "__outbox_relay_positions", partitions: 1, replicas: 3, createFlags: positionsCreateFlags,
		configs: map[string]string{"min.insync.replicas": "2", "unclean.leader.election.enable": "false", "retention.ms": "604800000",
			"cleanup.policy": "compact"}}, defaultRF: 3}
}

func TestPositionsTopic(t *testing.T) {
	const p = "__outbox_relay_positions"
	create := "kafka-topics.sh --create --topic " + p + " --partitions 1 --config cleanup.policy=compact --replication-factor 3 --config min.insync.replicas=2"
	alter := "kafka-configs.sh --alter --entity-type topics --entity-name " + p + " --add-config cleanup.policy=compact"
	for _, c := range []struct {
		name   string
		change func(*positionsFacts)
		want   []string
		forbid []Level
	}{
		{"good", func(*positionsFacts) {}, []string{"PASS positions topic: " + p + ": cleanup.policy=compact, the relay's principal may read it",
			"PASS topic " + p + ": 1 partitions, replication factor 3, min.insync.replicas 2"}, []Level{Warn, Fail}},
		{"delete", func(f *positionsFacts) { f.topic.configs["cleanup.policy"] = "delete" },
			[]string{"FAIL " + p + " has cleanup.policy=delete, not compact: the relay reads the whole, ever-growing log at every start | " + alter,
				"PASS topic " + p}, []Level{Warn}},
		{"compact,delete", func(f *positionsFacts) { f.topic.configs["cleanup.policy"] = "compact,delete" },
			[]string{"WARN cleanup.policy=compact,delete: an idle slot's last position expires with retention.ms | " + alter}, []Level{Fail}},
		{"no read", func(f *positionsFacts) { f.readErr = kafka.TopicAuthorizationFailed },
			[]string{"FAIL " + p + ": the relay's principal may not read it (Fetch: TOPIC_AUTHORIZATION_FAILED) | " +
				"grant Read on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Read --topic " + p}, []Level{Warn}},
		{"read unknown", func(f *positionsFacts) { f.readErr = errors.New("i/o timeout") },
			[]string{"WARN cannot check that the relay's principal may read it: i/o timeout"}, []Level{Fail}},
		// Replication is checked as the outbox topics', with the positions
		// topic's own kafka-topics.sh flags in the fix.
		{"one replica", func(f *positionsFacts) { f.topic.replicas, f.topic.configs["min.insync.replicas"] = 1, "1" },
			[]string{"PASS positions topic", "WARN topic " + p + ": 1 partitions, replication factor 1, min.insync.replicas 1: no redundancy | re-create the topic with " + create},
			[]Level{Fail}},
		{"configs unreadable", func(f *positionsFacts) { f.topic.configs, f.topic.configErr = nil, kafka.TopicAuthorizationFailed },
			[]string{"WARN topic " + p + ": 1 partitions, replication factor 3; configs unreadable | --operation DescribeConfigs --topic " + p},
			[]Level{Pass, Fail}},
		{"missing, creatable", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, defaultRF: 3}
		},
			[]string{"PASS " + p + " is missing: the relay creates it at start (1 partition, cleanup.policy=compact, replication factor 3, the brokers' default.replication.factor)"},
			[]Level{Warn, Fail}},
		{"missing, creatable, one replica", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, defaultRF: 1}
		}, []string{"WARN replication factor 1, the brokers' default.replication.factor): fewer than 3 replicas | create it first with 3 replicas: " + create},
			[]Level{Pass, Fail}},
		{"missing, default unknown", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, defaultRF: -1}
		}, []string{"PASS (1 partition, cleanup.policy=compact, the brokers' default.replication.factor)"}, []Level{Warn, Fail}},
		{"missing, no create", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, createErr: kafka.TopicAuthorizationFailed, defaultRF: 1}
		}, []string{"FAIL " + p + " is missing and the relay's principal may not create it | create it: " + create +
			"; or grant Create on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Create --topic " + p +
			"; if it exists, grant Describe and Read and Write on the topic"}, []Level{Pass, Warn}},
		{"exists, not describable", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, createErr: kafka.TopicAlreadyExists}
		}, []string{"FAIL exists but the relay's principal may not describe it | --operation Describe --operation Read --operation Write --topic " + p},
			[]Level{Pass, Warn}},
		{"missing, not creatable", func(f *positionsFacts) {
			*f = positionsFacts{topic: topicFacts{name: p, missing: kafka.UnknownTopicOrPartition}, createErr: kafka.InvalidReplicationFactor}
		}, []string{"WARN is missing and the relay could not create it as it would: | create it: " + create}, []Level{Pass, Fail}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := goodPositions()
			c.change(&f)
			r := &Report{}
			evalPositions(f, r)
			expect(t, r, c.want, c.forbid...)
		})
	}
}
