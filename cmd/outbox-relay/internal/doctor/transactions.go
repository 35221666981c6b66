package doctor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaproduce"
)

// TransactionTarget is what the relay uses in Kafka with --delivery
// exactly-once: its transactional producer and the positions topic.
type TransactionTarget struct {
	// TransactionalID is the relay's transactional id
	// (relay.Config.Publish.TransactionalID, resolved: never empty).
	TransactionalID string
	// PositionsTopic is the compacted topic where every transaction
	// records the source position it covers.
	PositionsTopic string
	// Timeout is the transaction.timeout.ms the relay asks for in its
	// InitProducerId.
	Timeout time.Duration
}

// The broker settings the transaction checks read, in one DescribeConfigs
// request per broker (they are per-broker, static settings).
const (
	txnLogReplicationFactor = "transaction.state.log.replication.factor"
	txnLogMinISR            = "transaction.state.log.min.isr"
	txnMaxTimeout           = "transaction.max.timeout.ms"
	defaultReplication      = "default.replication.factor"
)

// CheckTransactions checks what exactly-once delivery needs beyond
// CheckKafka: that the relay's principal may use its transactional id and
// write its topics in a transaction, the brokers' transaction settings,
// and the positions topic.
//
// Nothing here may disturb a relay that is running with the same
// transactional id: doctor never sends InitProducerId with it, which
// would bump the producer epoch and fence (abort and disable) the running
// relay. Instead:
//
//   - FindCoordinator (key type transaction) proves DESCRIBE on the
//     TransactionalId. On a cluster without transactions so far, it makes
//     the brokers create __transaction_state, which exactly-once needs
//     anyway.
//   - AddPartitionsToTxn under producer id -1 proves WRITE on the
//     TransactionalId and on every topic it names: the broker authorizes
//     the transactional id first (TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
//     then each topic (TOPIC_AUTHORIZATION_FAILED), and only then asks the
//     coordinator, which refuses the unknown producer id
//     (INVALID_PRODUCER_ID_MAPPING) before it changes anything: a running
//     transaction is neither touched nor aborted.
//
// The broker's own authorizer answers, so literal, prefixed and wildcard
// ACLs, DENY entries, super users and custom authorizers all count as
// they will for the relay. DescribeAcls could not do that (it lists ACLs
// but does not evaluate them, and needs DESCRIBE on the cluster, which
// the relay's principal rarely has), and an InitProducerId with some
// other, probe transactional id proves nothing about the real one: a
// literal ACL on the real id does not cover the probe, and a prefixed ACL
// may cover one and not the other.
func CheckTransactions(ctx context.Context, kt KafkaTarget, tt TransactionTarget, r *Report) {
	c, closeIdle := kt.Client()
	defer closeIdle()
	topics := []string{tt.PositionsTopic}
	for _, t := range kt.Topics {
		if !slices.Contains(topics, t) {
			topics = append(topics, t)
		}
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	md, err := c.Metadata(mctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return // CheckKafka reported the unreachable brokers
	}

	coord := transactionalIDFacts{id: tt.TransactionalID}
	coord.coordinator, coord.coordErr = findTxnCoordinator(ctx, c, tt.TransactionalID)
	if !errors.Is(coord.coordErr, kafka.TransactionalIDAuthorizationFailed) {
		coord.writes, coord.writeErr = probeTransactionalWrites(ctx, c, tt.TransactionalID, topics)
	}
	evalTransactionalID(coord, r)

	ids := make([]int, len(md.Brokers))
	for i, b := range md.Brokers {
		ids[i] = b.ID
	}
	settings, err := brokerSettings(ctx, c, ids)
	if err != nil {
		evalUnreadableSettings(err, r)
	} else {
		evalTransactionLog(settings, len(md.Brokers), coord.coordErr == nil, r)
		evalTransactionTimeout(settings, tt.Timeout, r)
	}

	pf := positionsFacts{topic: topicFacts{name: tt.PositionsTopic, createFlags: positionsCreateFlags}, defaultRF: -1}
	if err == nil {
		pf.defaultRF, _ = lowest(settings, func(b brokerSetting) int { return b.defaultRF })
	}
	for _, tp := range md.Topics {
		if tp.Name == tt.PositionsTopic {
			pf.topic.partitions, pf.topic.missing = len(tp.Partitions), tp.Error
			if len(tp.Partitions) > 0 {
				pf.topic.replicas = len(tp.Partitions[0].Replicas)
			}
		}
	}
	if pf.topic.missing == nil {
		pf.topic.configs, pf.topic.configErr = topicConfig(ctx, c, tt.PositionsTopic)
		pf.readErr = probeRead(ctx, c, tt.PositionsTopic)
	} else {
		pf.createErr = probeCreate(ctx, c, tt.PositionsTopic)
	}
	evalPositions(pf, r)
}

// transactionalIDFacts is what the transactional id checks learnt.
type transactionalIDFacts struct {
	id string
	// coordinator is the broker FindCoordinator named, unless coordErr.
	coordinator int
	coordErr    error
	// writes is the AddPartitionsToTxn probe's answer per topic (nil: the
	// topic passed), unless writeErr; neither is set when coordErr already
	// refused the transactional id.
	writes   map[string]error
	writeErr error
}

// findTxnCoordinator asks for the transactional id's coordinator, for up
// to 15 s while the coordinator is not available yet (__transaction_state
// being created or loaded, which the first request on a cluster starts).
func findTxnCoordinator(ctx context.Context, c *kafka.Client, id string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	txn := kafkaproduce.Txn{Client: c, ID: id}
	for {
		node, err := txn.FindCoordinator(ctx)
		if !kafkaproduce.CoordinatorMoving(err) {
			return node, err
		}
		select {
		case <-ctx.Done():
			return -1, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// probeTransactionalWrites sends AddPartitionsToTxn for partition 0 of
// each topic under producer id -1 (see CheckTransactions: the coordinator
// refuses it without a change) and returns each topic's verdict: nil when
// the principal may write it in a transaction (whether or not the topic
// exists yet), TopicAuthorizationFailed when not, and
// TransactionalIDAuthorizationFailed for every topic when the principal
// may not write the transactional id.
func probeTransactionalWrites(ctx context.Context, c *kafka.Client, id string, topics []string) (map[string]error, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	parts := make([]kafkaproduce.TopicPartition, len(topics))
	for i, t := range topics {
		parts[i] = kafkaproduce.TopicPartition{Topic: t}
	}
	failed, err := kafkaproduce.Txn{Client: c, ID: id}.AddPartitions(ctx, kafkaproduce.ProducerID{ID: -1, Epoch: -1}, parts)
	if err != nil {
		return nil, fmt.Errorf("AddPartitionsToTxn: %w", err)
	}
	out := map[string]error{}
	for _, t := range topics {
		out[t] = writeVerdict(failed[kafkaproduce.TopicPartition{Topic: t}])
	}
	return out, nil
}

// writeVerdict reads one partition's AddPartitionsToTxn error: the
// authorization failures stand, and every answer the broker gives only
// after its authorization checks passed means "may write".
func writeVerdict(err error) error {
	switch {
	case err == nil,
		errors.Is(err, kafka.InvalidProducerIDMapping),        // the coordinator's refusal of producer id -1
		errors.Is(err, kafkaproduce.ErrOperationNotAttempted), // passed, another partition did not
		errors.Is(err, kafka.UnknownTopicOrPartition),         // authorized, not created yet
		errors.Is(err, kafka.NotCoordinatorForGroup),          // NOT_COORDINATOR
		errors.Is(err, kafka.GroupCoordinatorNotAvailable),    // COORDINATOR_NOT_AVAILABLE
		errors.Is(err, kafka.GroupLoadInProgress),             // COORDINATOR_LOAD_IN_PROGRESS
		errors.Is(err, kafka.ConcurrentTransactions),
		errors.Is(err, kafka.InvalidProducerEpoch),
		errors.Is(err, kafka.ProducerFenced):
		return nil
	}
	return err
}

// aclTransactionalID is the fix that grants the relay's principal WRITE
// and DESCRIBE on its transactional id.
func aclTransactionalID(id string) string {
	return "grant Write and Describe on the transactional id: kafka-acls.sh --add --allow-principal User:<relay's principal> " +
		"--operation Write --operation Describe --transactional-id " + id +
		" (or one ACL for every slot's relay: --resource-pattern-type prefixed --transactional-id outbox-relay-)"
}

// evalTransactionalID adds the transactional id's finding and, when the
// principal may use the id, the finding of its transactional writes.
func evalTransactionalID(f transactionalIDFacts, r *Report) {
	const check = "transactional id"
	q := strconv.Quote(f.id)
	switch {
	case errors.Is(f.coordErr, kafka.TransactionalIDAuthorizationFailed):
		r.add(check, Fail, q+": the relay's principal may not describe it (FindCoordinator: TRANSACTIONAL_ID_AUTHORIZATION_FAILED): "+
			"the relay cannot start a transaction", aclTransactionalID(f.id))
		return
	case f.writeErr != nil:
		r.add(check, Warn, q+": cannot check that the relay's principal may write it: "+f.writeErr.Error(),
			"check the brokers' logs; the relay needs Write and Describe on it: "+aclTransactionalID(f.id))
		return
	}
	for _, err := range f.writes {
		if errors.Is(err, kafka.TransactionalIDAuthorizationFailed) {
			r.add(check, Fail, q+": the relay's principal may not write it (AddPartitionsToTxn: TRANSACTIONAL_ID_AUTHORIZATION_FAILED): "+
				"its InitProducerId and every transaction would be refused", aclTransactionalID(f.id))
			return
		}
	}
	if f.coordErr != nil {
		r.add(check, Pass, q+": the relay's principal may write it", "")
		r.add("transaction coordinator", Fail, "no coordinator for "+q+": "+f.coordErr.Error(),
			"check that __transaction_state exists with a leader for every partition: transaction.state.log.replication.factor "+
				"must not exceed the running brokers (see transaction log below); the brokers' logs say why")
	} else {
		r.add(check, Pass, fmt.Sprintf("%s: broker %d coordinates it; the relay's principal may describe and write it", q, f.coordinator), "")
	}

	var denied, odd []string
	topics := make([]string, 0, len(f.writes))
	for t := range f.writes {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	var fixes []string
	for _, t := range topics {
		switch err := f.writes[t]; {
		case err == nil:
		case errors.Is(err, kafka.TopicAuthorizationFailed):
			denied = append(denied, t)
			fixes = append(fixes, acl(t, "Write"))
		default:
			odd = append(odd, t+" ("+err.Error()+")")
		}
	}
	const wcheck = "transactional writes"
	if len(denied) > 0 {
		r.add(wcheck, Fail, "the relay's principal may not write "+strings.Join(denied, ", ")+" in a transaction (TOPIC_AUTHORIZATION_FAILED)",
			strings.Join(fixes, "; "))
	}
	if len(odd) > 0 {
		r.add(wcheck, Warn, "cannot check that the relay's principal may write "+strings.Join(odd, ", "), "check the brokers' logs")
	}
	if len(denied) == 0 && len(odd) == 0 {
		r.add(wcheck, Pass, fmt.Sprintf("the relay's principal may write %d topic(s) in a transaction: %s", len(topics), strings.Join(topics, ", ")), "")
	}
}

// brokerSetting is one broker's transaction settings.
type brokerSetting struct {
	broker                    int
	replicationFactor, minISR int
	maxTimeout                time.Duration
	defaultRF                 int
}

// brokerSettings reads the transaction settings of every broker
// (DescribeConfigs on the broker resources: DESCRIBE_CONFIGS on the
// cluster).
func brokerSettings(ctx context.Context, c *kafka.Client, brokers []int) ([]brokerSetting, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req := &kafka.DescribeConfigsRequest{Addr: c.Addr}
	for _, id := range brokers {
		req.Resources = append(req.Resources, kafka.DescribeConfigRequestResource{ResourceType: kafka.ResourceTypeBroker,
			ResourceName: strconv.Itoa(id), ConfigNames: []string{txnLogReplicationFactor, txnLogMinISR, txnMaxTimeout, defaultReplication}})
	}
	res, err := c.DescribeConfigs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("DescribeConfigs: %w", err)
	}
	var out []brokerSetting
	for _, rs := range res.Resources {
		if rs.Error != nil {
			return nil, fmt.Errorf("DescribeConfigs broker %s: %w", rs.ResourceName, rs.Error)
		}
		values := map[string]int64{}
		for _, e := range rs.ConfigEntries {
			v, err := strconv.ParseInt(e.ConfigValue, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("broker %s: %s %q: %w", rs.ResourceName, e.ConfigName, e.ConfigValue, err)
			}
			values[e.ConfigName] = v
		}
		for _, n := range []string{txnLogReplicationFactor, txnLogMinISR, txnMaxTimeout, defaultReplication} {
			if _, ok := values[n]; !ok {
				return nil, fmt.Errorf("broker %s did not answer %s", rs.ResourceName, n)
			}
		}
		id, _ := strconv.Atoi(rs.ResourceName)
		out = append(out, brokerSetting{broker: id, replicationFactor: int(values[txnLogReplicationFactor]), minISR: int(values[txnLogMinISR]),
			maxTimeout: time.Duration(values[txnMaxTimeout]) * time.Millisecond, defaultRF: int(values[defaultReplication])})
	}
	if len(out) == 0 {
		return nil, errors.New("no broker answered DescribeConfigs")
	}
	slices.SortFunc(out, func(a, b brokerSetting) int { return a.broker - b.broker })
	return out, nil
}

// lowest is the lowest value of field among the brokers and the broker
// that has it (the first of them).
func lowest[T int | time.Duration](s []brokerSetting, field func(brokerSetting) T) (T, int) {
	v, at := field(s[0]), s[0].broker
	for _, b := range s[1:] {
		if field(b) < v {
			v, at = field(b), b.broker
		}
	}
	return v, at
}

// differs reports whether the brokers disagree on field.
func differs[T int | time.Duration](s []brokerSetting, field func(brokerSetting) T) bool {
	for _, b := range s[1:] {
		if field(b) != field(s[0]) {
			return true
		}
	}
	return false
}

// describeBrokers is how to read the brokers' settings without doctor.
const describeBrokers = "kafka-configs.sh --describe --entity-type brokers --entity-name <broker id> --all"

// evalUnreadableSettings adds the finding of brokers whose settings
// doctor may not read: the transaction log and timeout checks need them.
func evalUnreadableSettings(err error, r *Report) {
	fix := "check transaction.state.log.replication.factor (3), transaction.state.log.min.isr (2) and transaction.max.timeout.ms " +
		"(at least --transaction-timeout) yourself: " + describeBrokers
	if errors.Is(err, kafka.ClusterAuthorizationFailed) {
		fix = "grant DescribeConfigs on the cluster (kafka-acls.sh --add --allow-principal User:<relay's principal> --operation DescribeConfigs --cluster), or " + fix
	}
	r.add("transaction settings", Warn, "cannot read the brokers' transaction settings: "+err.Error(), fix)
}

// evalTransactionLog adds the finding of the transaction state log's
// settings. Every commit goes through __transaction_state, so its
// replication is the exactly-once guarantee's durability: like the
// outbox topics, 3 replicas and min.insync.replicas 2 keep a commit
// through the loss of any one broker and let one be down without stopping
// transactions. The settings apply when __transaction_state is created
// (the first FindCoordinator for a transactional id); an existing one keeps
// what it got then. coordinator is set when a coordinator answered (so
// __transaction_state exists).
func evalTransactionLog(s []brokerSetting, brokers int, coordinator bool, r *Report) {
	const check = "transaction log"
	rf, _ := lowest(s, func(b brokerSetting) int { return b.replicationFactor })
	isr, _ := lowest(s, func(b brokerSetting) int { return b.minISR })
	detail := fmt.Sprintf("%s %d, %s %d", txnLogReplicationFactor, rf, txnLogMinISR, isr)
	if differs(s, func(b brokerSetting) int { return b.replicationFactor }) || differs(s, func(b brokerSetting) int { return b.minISR }) {
		detail += " (the lowest: the brokers differ)"
	}
	recommended := "set transaction.state.log.replication.factor=3 and transaction.state.log.min.isr=2 in every broker's server.properties " +
		"(they apply when __transaction_state is created; an existing one keeps its replicas, add them with kafka-reassign-partitions.sh, " +
		"and its min.insync.replicas: kafka-configs.sh --alter --entity-type topics --entity-name __transaction_state --add-config min.insync.replicas=2)"
	switch {
	case rf > brokers && !coordinator:
		r.add(check, Fail, fmt.Sprintf("%s: more replicas than the %d broker(s), so __transaction_state cannot be created and no transaction coordinator starts", detail, brokers),
			fmt.Sprintf("set transaction.state.log.replication.factor=%d (and transaction.state.log.min.isr at most that) in every broker's server.properties, or run more brokers", brokers))
	case isr > rf:
		r.add(check, Fail, detail+": min.isr above the replication factor: the coordinators cannot write __transaction_state, so no transaction begins or commits",
			fmt.Sprintf("lower transaction.state.log.min.isr to at most %d (kafka-configs.sh --alter --entity-type topics --entity-name __transaction_state --add-config min.insync.replicas=%d, and in server.properties)", rf, max(1, min(2, rf))))
	case brokers == 1:
		r.add(check, Warn, "a single broker ("+detail+"): the transaction log, the positions topic and the events have one copy each: "+
			"losing that broker's disk loses committed transactions and the relay's positions, and exactly-once no longer holds; "+
			"while the broker is down no transaction commits and the relay waits",
			"for production, run 3 brokers or more and "+recommended)
	case rf < 3:
		r.add(check, Warn, detail+": fewer than 3 copies of the transaction state: either one broker down stops every transaction "+
			"or a broker loss can lose committed transactions", recommended)
	case isr < 2:
		r.add(check, Warn, detail+": a commit written to one replica of the transaction log alone is lost if that broker fails", recommended)
	default:
		r.add(check, Pass, detail, "")
	}
}

// evalTransactionTimeout adds the finding of the relay's transaction
// timeout against the brokers' transaction.max.timeout.ms: the
// coordinator refuses an InitProducerId asking for more with
// INVALID_TRANSACTION_TIMEOUT, and any broker may become the coordinator,
// so the lowest counts.
func evalTransactionTimeout(s []brokerSetting, timeout time.Duration, r *Report) {
	const check = "transaction timeout"
	most, at := lowest(s, func(b brokerSetting) time.Duration { return b.maxTimeout })
	where := ""
	if differs(s, func(b brokerSetting) time.Duration { return b.maxTimeout }) {
		where = fmt.Sprintf(" on broker %d", at)
	}
	limit := fmt.Sprintf("%s %d (%s)%s", txnMaxTimeout, most.Milliseconds(), most, where)
	if timeout > most {
		r.add(check, Fail, fmt.Sprintf("--transaction-timeout %s exceeds the brokers' %s: the coordinator refuses the relay's InitProducerId "+
			"with INVALID_TRANSACTION_TIMEOUT and the relay cannot start", timeout, limit),
			fmt.Sprintf("lower --transaction-timeout to %s or less, or raise transaction.max.timeout.ms on every broker (server.properties, then a rolling restart)", most))
		return
	}
	r.add(check, Pass, fmt.Sprintf("--transaction-timeout %s within the brokers' %s", timeout, limit), "")
}

// positionsCreateFlags are the kafka-topics.sh flags of the positions
// topic as the relay creates it, besides its replication.
const positionsCreateFlags = " --partitions 1 --config cleanup.policy=compact"

// positionsFacts is what the positions topic checks read.
type positionsFacts struct {
	// topic is the topic as the outbox topics' checks see it.
	topic topicFacts
	// readErr is the Fetch probe's error (the relay reads the topic at
	// start): nil when the principal may read it.
	readErr error
	// createErr is the validate-only CreateTopics probe's error, for a
	// missing topic.
	createErr error
	// defaultRF is the brokers' default.replication.factor (-1: unknown).
	defaultRF int
}

// probeRead fetches from partition 0 of topic, which needs READ on it:
// the relay reads the positions topic at start.
func probeRead(ctx context.Context, c *kafka.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.Fetch(ctx, &kafka.FetchRequest{Addr: c.Addr, Topic: topic, Partition: 0, Offset: 0, MinBytes: 1, MaxBytes: 1024,
		MaxWait: 10 * time.Millisecond})
	if err != nil {
		return err
	}
	if errors.Is(res.Error, kafka.OffsetOutOfRange) { // offset 0 compacted or deleted away: authorized
		return nil
	}
	return res.Error
}

// probeCreate asks the brokers whether the relay's principal could create
// the positions topic as the relay does (1 partition, the default
// replication factor, cleanup.policy=compact): CreateTopics with
// validate_only creates nothing.
func probeCreate(ctx context.Context, c *kafka.Client, topic string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Addr: c.Addr, ValidateOnly: true, Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 1, ReplicationFactor: -1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "cleanup.policy", ConfigValue: "compact"}},
	}}})
	if err != nil {
		return fmt.Errorf("CreateTopics (validate only): %w", err)
	}
	return res.Errors[topic]
}

// evalPositions adds the positions topic's findings. The relay reads the
// topic at every start for its slot's last position and writes it in
// every transaction, so it must be compacted (one record per slot kept;
// with cleanup.policy=delete the relay reads an ever-growing log at every
// start, and an idle slot's position expires with retention.ms). Its
// replication is checked like the outbox topics'.
func evalPositions(f positionsFacts, r *Report) {
	const check = "positions topic"
	name := f.topic.name
	create := "kafka-topics.sh --create --topic " + name + positionsCreateFlags + " --replication-factor 3 --config min.insync.replicas=2"
	if f.topic.missing != nil {
		switch {
		case f.createErr == nil:
			rf := "the brokers' default.replication.factor"
			if f.defaultRF > 0 {
				rf = fmt.Sprintf("replication factor %d, %s", f.defaultRF, rf)
			}
			detail := name + " is missing: the relay creates it at start (1 partition, cleanup.policy=compact, " + rf + ")"
			if f.defaultRF > 0 && f.defaultRF < 3 {
				r.add(check, Warn, detail+": fewer than 3 replicas", "create it first with 3 replicas: "+create)
			} else {
				r.add(check, Pass, detail, "")
			}
		case errors.Is(f.createErr, kafka.TopicAuthorizationFailed):
			r.add(check, Fail, name+" is missing and the relay's principal may not create it (or it exists and the principal may not describe it)",
				"create it: "+create+"; or "+acl(name, "Create")+"; if it exists, "+acl(name, "Describe", "Read", "Write"))
		case errors.Is(f.createErr, kafka.TopicAlreadyExists):
			r.add(check, Fail, name+" exists but the relay's principal may not describe it", acl(name, "Describe", "Read", "Write"))
		default:
			r.add(check, Warn, name+" is missing and the relay could not create it as it would: "+f.createErr.Error(), "create it: "+create)
		}
		return
	}
	passed := true
	if f.topic.configErr == nil {
		policy := strings.Split(f.topic.configs["cleanup.policy"], ",")
		alter := "kafka-configs.sh --alter --entity-type topics --entity-name " + name + " --add-config cleanup.policy=compact"
		switch {
		case !slices.Contains(policy, "compact"):
			passed = false
			r.add(check, Fail, fmt.Sprintf("%s has cleanup.policy=%s, not compact: the relay reads the whole, ever-growing log at every start, "+
				"and an idle slot's position expires with retention.ms", name, f.topic.configs["cleanup.policy"]), alter)
		case slices.Contains(policy, "delete"):
			passed = false
			r.add(check, Warn, name+" has cleanup.policy=compact,delete: an idle slot's last position expires with retention.ms", alter)
		}
	}
	switch {
	case f.readErr == nil:
	case errors.Is(f.readErr, kafka.TopicAuthorizationFailed):
		passed = false
		r.add(check, Fail, name+": the relay's principal may not read it (Fetch: TOPIC_AUTHORIZATION_FAILED); the relay reads its slot's last position from it at start",
			acl(name, "Read"))
	default:
		passed = false
		r.add(check, Warn, name+": cannot check that the relay's principal may read it: "+f.readErr.Error(), "check the brokers' logs")
	}
	if passed && f.topic.configErr == nil {
		r.add(check, Pass, name+": cleanup.policy=compact, the relay's principal may read it", "")
	}
	evalTopic(f.topic, 0, r)
}
