//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestDoctorExactlyOnce runs `doctor --delivery exactly-once` on the
// stack's single broker: without --delivery it says nothing about
// transactions; with it the transactional id and the transactional writes
// pass, the transaction log warns that it is a single broker, the timeout
// passes, and a missing positions topic is one the relay may create
// (doctor does not create it). A positions topic with
// cleanup.policy=delete fails with the kafka-configs.sh fix, a compacted
// one passes. And doctor never disturbs a relay running with the same
// transactional id: an open transaction of that id commits after doctor
// ran (an InitProducerId of doctor's would have fenced it).
func TestDoctorExactlyOnce(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{})
	positions := "it." + env.Sfx + ".positions"
	txnID := env.TransactionalID()
	eos := []string{"doctor", "--topics", env.Topic, "--delivery", "exactly-once", "--positions-topic", positions}

	res := env.RunCLI(30*time.Second, nil, "doctor", "--topics", env.Topic, "--positions-topic", positions)
	for _, no := range []string{"transactional id", "transaction log", "positions topic", "transaction timeout"} {
		if strings.Contains(res.Stdout, no) {
			t.Errorf("doctor at least once reports %q\n%s", no, res.Stdout)
		}
	}

	res = env.RunCLI(60*time.Second, nil, eos...)
	t.Logf("doctor --delivery exactly-once on the stack: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 || strings.Contains(res.Stdout, "FAIL") {
		t.Errorf("exit %d, want 0 without FAIL\n%s", res.Code, tail(res.Stderr, 10))
	}
	for _, want := range []string{
		`PASS  transactional id             "` + txnID + `": broker 1 coordinates it; the relay's principal may describe and write it`,
		"PASS  transactional writes         the relay's principal may write 2 topic(s) in a transaction: " + env.Topic + ", " + positions,
		"WARN  transaction log              a single broker (transaction.state.log.replication.factor 1, transaction.state.log.min.isr 1)",
		"fix: for production, run 3 brokers or more and set transaction.state.log.replication.factor=3 and transaction.state.log.min.isr=2",
		"PASS  transaction timeout          --transaction-timeout 1m0s within the brokers' transaction.max.timeout.ms 900000 (15m0s)",
		"WARN  positions topic              " + positions + " is missing: the relay creates it at start (1 partition, cleanup.policy=compact, replication factor 1",
		"fix: create it first with 3 replicas: kafka-topics.sh --create --topic " + positions + " --partitions 1 --config cleanup.policy=compact",
	} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n, err := topicPartitions(ctx, positions); err == nil || n > 0 {
		t.Errorf("doctor created %s (%d partitions): its CreateTopics must validate only", positions, n)
	}

	// The positions topic: delete fails, compact passes.
	deleted, compacted := positions+".delete", positions+".compact"
	if _, err := kafkaClient().CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: deleted, NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "delete"}}},
		{Topic: compacted, NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}}},
	}}); err != nil {
		t.Fatalf("create %s, %s: %v", deleted, compacted, err)
	}
	env.CreateTopic(ctx, deleted, 1)
	env.CreateTopic(ctx, compacted, 1)
	res = env.RunCLI(60*time.Second, nil, "doctor", "--topics", env.Topic, "--delivery", "exactly-once", "--positions-topic", deleted)
	t.Logf("doctor with a positions topic of cleanup.policy=delete: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 1 {
		t.Errorf("exit %d, want 1", res.Code)
	}
	for _, want := range []string{"FAIL  positions topic              " + deleted + " has cleanup.policy=delete, not compact: the relay reads the whole, ever-growing log at every start",
		"fix: kafka-configs.sh --alter --entity-type topics --entity-name " + deleted + " --add-config cleanup.policy=compact",
		"WARN  topic " + deleted, "re-create the topic with kafka-topics.sh --create --topic " + deleted + " --partitions 1 --config cleanup.policy=compact --replication-factor 3"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	// A "running relay": an open transaction under the relay's
	// transactional id. doctor's checks must leave it committable.
	c := kafkaClient()
	var ip *kafka.InitProducerIDResponse
	var err error
	if !within(15*time.Second, 250*time.Millisecond, func() bool {
		ip, err = c.InitProducerID(ctx, &kafka.InitProducerIDRequest{TransactionalID: txnID, TransactionTimeoutMs: 60000})
		// The coordinator may still be loading (COORDINATOR_LOAD_IN_PROGRESS).
		return err != nil || ip.Error == nil || !errors.Is(ip.Error, kafka.GroupLoadInProgress) && !errors.Is(ip.Error, kafka.GroupCoordinatorNotAvailable)
	}) || err != nil || ip.Error != nil {
		t.Fatalf("InitProducerId %s: %v %v", txnID, err, ip)
	}
	pid, epoch := ip.Producer.ProducerID, ip.Producer.ProducerEpoch
	add, err := c.AddPartitionsToTxn(ctx, &kafka.AddPartitionsToTxnRequest{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch,
		Topics: map[string][]kafka.AddPartitionToTxn{env.Topic: {{Partition: 0}}, compacted: {{Partition: 0}}}})
	if err != nil {
		t.Fatalf("AddPartitionsToTxn: %v", err)
	}
	for topic, ps := range add.Topics {
		for _, p := range ps {
			if p.Error != nil {
				t.Fatalf("AddPartitionsToTxn %s[%d]: %v", topic, p.Partition, p.Error)
			}
		}
	}
	res = env.RunCLI(60*time.Second, nil, "doctor", "--topics", env.Topic, "--delivery", "exactly-once", "--positions-topic", compacted)
	t.Logf("doctor with a compacted positions topic, during a transaction of %s: exit %d\n%s", txnID, res.Code, res.Stdout)
	if res.Code != 0 || strings.Contains(res.Stdout, "FAIL") {
		t.Errorf("exit %d, want 0 without FAIL", res.Code)
	}
	for _, want := range []string{"PASS  positions topic              " + compacted + ": cleanup.policy=compact, the relay's principal may read it",
		`PASS  transactional id             "` + txnID + `"`} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	end, err := c.EndTxn(ctx, &kafka.EndTxnRequest{TransactionalID: txnID, ProducerID: pid, ProducerEpoch: epoch, Committed: true})
	if err != nil || end.Error != nil {
		t.Errorf("the transaction open while doctor ran does not commit (doctor fenced it?): %v %v", err, end.Error)
	}
}

// TestDoctorExactlyOnceACL runs `doctor --delivery exactly-once` against
// a broker that authorizes (StandardAuthorizer) and allows transactions
// of at most 30 s (transaction.max.timeout.ms=30000). The relay's
// principal starts with WRITE on the outbox topic and READ and
// DESCRIBE_CONFIGS on the positions topic, nothing on the transactional
// id: FindCoordinator refuses it (a fail naming the grant), and the
// brokers' settings are unreadable (a warning naming DescribeConfigs on
// the cluster). With DESCRIBE on the id alone, AddPartitionsToTxn shows
// that WRITE is missing. With WRITE through a prefixed ACL and
// DESCRIBE_CONFIGS on the cluster, the id passes, the positions topic
// fails for the missing WRITE, and the default --transaction-timeout (1m)
// fails against the broker's 30 s. With WRITE on the positions topic and
// --transaction-timeout 20s no check fails.
func TestDoctorExactlyOnceACL(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	pki := newSecurePKI(t)
	k := startSecureKafkaWith(t, pki, secureKafkaOptions{ACLs: true, Props: []string{"transaction.max.timeout.ms=30000"}})
	env := NewEnv(t, EnvOptions{NoTopic: true})
	env.Brokers = []string{k.Addr}
	positions := "it." + env.Sfx + ".positions"
	txnID := env.TransactionalID()
	admin := k.client(k.adminSecurity(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if res, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{
		{Topic: env.Topic, NumPartitions: 1, ReplicationFactor: 1},
		{Topic: positions, NumPartitions: 1, ReplicationFactor: 1, ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}}},
	}}); err != nil || res.Errors[env.Topic] != nil || res.Errors[positions] != nil {
		t.Fatalf("create topics as the admin: %v %v", err, res)
	}
	grant := func(rt kafka.ResourceType, name string, pattern kafka.PatternType, ops ...kafka.ACLOperationType) {
		t.Helper()
		var acls []kafka.ACLEntry
		for _, op := range ops {
			acls = append(acls, kafka.ACLEntry{ResourceType: rt, ResourceName: name, ResourcePatternType: pattern,
				Principal: "User:" + k.User, Host: "*", Operation: op, PermissionType: kafka.ACLPermissionTypeAllow})
		}
		res, err := admin.CreateACLs(ctx, &kafka.CreateACLsRequest{ACLs: acls})
		if err != nil {
			t.Fatalf("grant %v on %s: %v", ops, name, err)
		}
		for _, e := range res.Errors {
			if e != nil {
				t.Fatalf("grant %v on %s: %v", ops, name, e)
			}
		}
	}
	grant(kafka.ResourceTypeTopic, env.Topic, kafka.PatternTypeLiteral, kafka.ACLOperationTypeWrite)
	grant(kafka.ResourceTypeTopic, positions, kafka.PatternTypeLiteral, kafka.ACLOperationTypeRead, kafka.ACLOperationTypeDescribeConfigs)

	// doctor runs until its output holds until (ACLs reach the broker's
	// authorizer through the metadata log) and returns the last run.
	doctor := func(until string, extra ...string) CLIResult {
		t.Helper()
		args := append([]string{"doctor", "--topics", env.Topic, "--delivery", "exactly-once", "--positions-topic", positions}, extra...)
		var res CLIResult
		if !within(20*time.Second, 500*time.Millisecond, func() bool {
			res = env.RunCLI(60*time.Second, k.clientEnv(), args...)
			return strings.Contains(res.Stdout, until)
		}) {
			t.Errorf("doctor %s: output lacks %q\n%s%s", strings.Join(extra, " "), until, res.Stdout, tail(res.Stderr, 10))
		}
		return res
	}
	check := func(res CLIResult, code int, want ...string) {
		t.Helper()
		if res.Code != code {
			t.Errorf("exit %d, want %d", res.Code, code)
		}
		for _, w := range want {
			if !strings.Contains(res.Stdout, w) {
				t.Errorf("doctor output lacks %q", w)
			}
		}
	}
	acl := "fix: grant Write and Describe on the transactional id: kafka-acls.sh --add --allow-principal User:<relay's principal> " +
		"--operation Write --operation Describe --transactional-id " + txnID

	res := doctor("FAIL  transactional id", "--transaction-timeout", "20s")
	t.Logf("doctor as %s without ACLs on the transactional id: exit %d\n%s", k.User, res.Code, res.Stdout)
	check(res, 1, `"`+txnID+`": the relay's principal may not describe it (FindCoordinator: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)`, acl,
		"WARN  transaction settings", "cannot read the brokers' transaction settings",
		"--operation DescribeConfigs --cluster",
		"PASS  positions topic              "+positions+": cleanup.policy=compact, the relay's principal may read it")

	grant(kafka.ResourceTypeTransactionalID, txnID, kafka.PatternTypeLiteral, kafka.ACLOperationTypeDescribe)
	res = doctor("may not write it (AddPartitionsToTxn", "--transaction-timeout", "20s")
	t.Logf("doctor as %s with DESCRIBE on %s: exit %d\n%s", k.User, txnID, res.Code, res.Stdout)
	check(res, 1, "FAIL  transactional id", `"`+txnID+`": the relay's principal may not write it (AddPartitionsToTxn: TRANSACTIONAL_ID_AUTHORIZATION_FAILED)`, acl)

	// WRITE through a prefixed ACL, as one grant for every slot's relay:
	// the broker's authorizer answers doctor's probe, so it counts.
	grant(kafka.ResourceTypeTransactionalID, "outbox-relay-", kafka.PatternTypePrefixed, kafka.ACLOperationTypeWrite)
	grant(kafka.ResourceTypeCluster, "kafka-cluster", kafka.PatternTypeLiteral, kafka.ACLOperationTypeDescribeConfigs)
	// Until the prefixed WRITE has reached the authorizer: the timeout
	// check fails at once, whatever the ACLs (a CI run read the output
	// before the grant took effect).
	res = doctor("PASS  transactional id")
	t.Logf("doctor as %s with WRITE on the transactional id, the default --transaction-timeout: exit %d\n%s", k.User, res.Code, res.Stdout)
	check(res, 1, `PASS  transactional id             "`+txnID+`": broker 1 coordinates it; the relay's principal may describe and write it`,
		"FAIL  transactional writes         the relay's principal may not write "+positions+" in a transaction (TOPIC_AUTHORIZATION_FAILED)",
		"fix: grant Write on the topic: kafka-acls.sh --add --allow-principal User:<relay's principal> --operation Write --topic "+positions,
		"--transaction-timeout 1m0s exceeds the brokers' transaction.max.timeout.ms 30000 (30s): the coordinator refuses the relay's InitProducerId with INVALID_TRANSACTION_TIMEOUT",
		"fix: lower --transaction-timeout to 30s or less, or raise transaction.max.timeout.ms on every broker",
		"WARN  transaction log              a single broker")

	grant(kafka.ResourceTypeTopic, positions, kafka.PatternTypeLiteral, kafka.ACLOperationTypeWrite)
	res = doctor("PASS  transactional writes", "--transaction-timeout", "20s")
	t.Logf("doctor as %s with every grant, --transaction-timeout 20s: exit %d\n%s", k.User, res.Code, res.Stdout)
	check(res, 0, `PASS  transactional id             "`+txnID+`"`,
		"PASS  transactional writes         the relay's principal may write 2 topic(s) in a transaction: "+env.Topic+", "+positions,
		"PASS  transaction timeout          --transaction-timeout 20s within the brokers' transaction.max.timeout.ms 30000 (30s)",
		"PASS  positions topic")
	if strings.Contains(res.Stdout, "FAIL") {
		t.Errorf("a FAIL with every grant")
	}

	// The relay with those grants: it streams and commits a position.
	// Then without READ on the positions topic (a DENY, which wins over
	// the ALLOW) the position read fails the same way on every start, so
	// the relay stops with exit 1 and the grant instead of reconnecting
	// for ever (issue 35). With READ back it resumes from the position.
	relayEnv := processEnv(env.BaseEnv(), k.clientEnv(), []string{"OUTBOX_RELAY_DELIVERY=exactly-once",
		"OUTBOX_RELAY_POSITIONS_TOPIC=" + positions, "OUTBOX_RELAY_TRANSACTION_TIMEOUT=20s", "OUTBOX_RELAY_BACKOFF_MAX=1s",
		fmt.Sprintf("OUTBOX_RELAY_METRICS_ADDR=127.0.0.1:%d", freePort(t))})
	const resumed = "resuming after the committed position in Kafka"
	first := StartRelay(t, relayEnv)
	if !within(60*time.Second, 100*time.Millisecond, func() bool { return first.LogContains(`"message":"streaming"`) || !first.Running() }) ||
		!first.Running() {
		t.Fatalf("relay with every grant is not streaming:\n%s", first.LogTail(20))
	}
	env.bulkInsert(10, 2)
	if !within(60*time.Second, 200*time.Millisecond, func() bool {
		res, err := admin.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{positions: {kafka.LastOffsetOf(0)}}})
		return err == nil && len(res.Topics[positions]) == 1 && res.Topics[positions][0].LastOffset > 0
	}) {
		t.Fatalf("no position record committed within 60s:\n%s", first.LogTail(20))
	}
	if code, exited := first.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want 0", exited, code)
	}

	denyRead := kafka.ACLEntry{ResourceType: kafka.ResourceTypeTopic, ResourceName: positions, ResourcePatternType: kafka.PatternTypeLiteral,
		Principal: "User:" + k.User, Host: "*", Operation: kafka.ACLOperationTypeRead, PermissionType: kafka.ACLPermissionTypeDeny}
	if res, err := admin.CreateACLs(ctx, &kafka.CreateACLsRequest{ACLs: []kafka.ACLEntry{denyRead}}); err != nil || res.Errors[0] != nil {
		t.Fatalf("deny READ on %s: %v %v", positions, err, res)
	}
	doctor("may not read it", "--transaction-timeout", "20s") // the DENY has reached the authorizer
	denied := StartRelay(t, relayEnv)
	code, exited := denied.Wait(60 * time.Second)
	t.Logf("relay without READ on %s: exited=%v code=%d\n%s", positions, exited, code, denied.LogTail(3))
	if !exited || code != 1 {
		denied.Term(10 * time.Second)
		t.Errorf("relay without READ on the positions topic: exited=%v code=%d, want exit 1 (not reconnecting for ever)", exited, code)
	}
	if want := "may not read the positions topic " + positions; !denied.LogContains(want) {
		t.Errorf("relay log lacks %q:\n%s", want, denied.LogTail(20))
	}

	if _, err := admin.DeleteACLs(ctx, &kafka.DeleteACLsRequest{Filters: []kafka.DeleteACLsFilter{{
		ResourceTypeFilter: denyRead.ResourceType, ResourceNameFilter: positions, ResourcePatternTypeFilter: denyRead.ResourcePatternType,
		PrincipalFilter: denyRead.Principal, HostFilter: "*", Operation: denyRead.Operation, PermissionType: denyRead.PermissionType,
	}}}); err != nil {
		t.Fatalf("delete the DENY: %v", err)
	}
	doctor("PASS  positions topic", "--transaction-timeout", "20s")
	again := StartRelay(t, relayEnv)
	if !within(60*time.Second, 100*time.Millisecond, func() bool { return again.LogContains(resumed) || !again.Running() }) || !again.Running() {
		t.Errorf("relay with READ back did not resume from the position:\n%s", again.LogTail(20))
	}
	if code, exited := again.Term(20 * time.Second); !exited || code != 0 {
		t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
	}
}
