package relay

import (
	"math"
	"net"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/fielderr"
	"github.com/outbox-relay/outbox-relay/internal/leader"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/replication"
)

// ErrRequired is the Err of a FieldError for a required field left empty.
var ErrRequired = fielderr.ErrRequired

// FieldError is one invalid Config field: Field (its Go path, e.g.
// "Publish.MaxBatch", or a group's name such as "Leader" for a rule over
// several fields), Value (the rejected value; nil when beside the point or
// secret) and Err (what is wrong and how to fix it). Validate and New join
// them (errors.Join), so a caller can list every problem at once and name
// each in its own terms: the binary prints its flag names instead of
// Field. It is the FieldError of inbox and outbox too: one type, so one
// errors.As handles every package's configuration errors.
type FieldError = fielderr.Error

// Validate checks every field and the rules between them, without any I/O.
// The error joins one *FieldError per problem; each says how to fix it.
func (c Config) Validate() error {
	_, err := c.withDefaults().compile()
	return err
}

// compiled is a validated Config's parsed values.
type compiled struct {
	pool *pgxpool.Config
	// replPool is the standby's (Database.ReplicationURL), nil without.
	replPool *pgxpool.Config
	table    migrations.Table
	template publisher.TopicTemplate
	policy   poison.Policy
}

// checks collects FieldErrors.
type checks = fielderr.List

// compile validates c (with its defaults set: withDefaults), component by
// component, and parses what Run needs.
func (c Config) compile() (compiled, error) {
	var out compiled
	var cs checks
	c.Database.validate(&cs, &out)
	validateKafka(c.Kafka, &cs)
	c.Publish.validate(&cs, &out)
	c.Window.validate(&cs, c.Publish)
	c.Leader.validate(&cs, c.Database)
	c.Cleanup.validate(&cs)
	c.Stats.validate(&cs)
	if c.ShutdownTimeout <= 0 {
		cs.Fail("ShutdownTimeout", c.ShutdownTimeout, "use a positive duration")
	}
	return out, cs.Err()
}

// connString reports whether s has the form of a PostgreSQL connection
// string (outboxdb.ConnString).
func connString(s string) bool { return outboxdb.ConnString(s) }

func (d DatabaseConfig) validate(cs *checks, out *compiled) {
	var err error
	switch {
	case d.URL == "":
		cs.Wrap("Database.URL", ErrRequired)
	case !connString(d.URL):
		cs.Fail("Database.URL", nil, "must be a postgres:// URL or a key=value connection string, e.g. postgres://user:pass@host:5432/db or host=db dbname=app user=relay")
	default:
		if out.pool, err = outboxdb.ParseConfig(d.URL); err != nil {
			cs.Wrap("Database.URL", err)
		} else {
			outboxdb.SetBeforeConnect(out.pool, d.BeforeConnect)
		}
	}
	if d.ReplicationURL != "" {
		if !connString(d.ReplicationURL) {
			cs.Fail("Database.ReplicationURL", nil, "must be a postgres:// URL or a key=value connection string of a hot standby, like Database.URL")
		} else if out.replPool, err = outboxdb.ParseConfig(d.ReplicationURL); err != nil {
			cs.Wrap("Database.ReplicationURL", err)
		} else {
			outboxdb.SetBeforeConnect(out.replPool, d.BeforeConnect)
		}
	}
	for _, n := range []struct{ field, v string }{{"Database.Slot", d.Slot}, {"Database.Publication", d.Publication}} {
		if !outboxdb.ValidName(n.v) {
			cs.Fail(n.field, n.v, "use 1-63 lower-case letters, digits and underscores")
		}
	}
	if t, err := migrations.ParseTable(d.Table); err != nil {
		cs.Wrap("Database.Table", err)
	} else {
		out.table = t
	}
	if d.StatusInterval <= 0 || d.StatusInterval > 30*time.Second {
		cs.Fail("Database.StatusInterval", d.StatusInterval, "use a value in (0, 30s], well under wal_sender_timeout")
	}
	if d.SlotCheckInterval <= 0 {
		cs.Fail("Database.SlotCheckInterval", d.SlotCheckInterval, "use a positive duration")
	}
	if d.WALSenderTimeout < 0 || d.WALSenderTimeout > 0 && (d.WALSenderTimeout < time.Second || d.WALSenderTimeout < 3*d.StatusInterval) {
		cs.Fail("Database.WALSenderTimeout", d.WALSenderTimeout,
			"use 0 (the server's setting) or at least 1s and 3 x Database.StatusInterval (%s)", 3*d.StatusInterval)
	}
}

func validateKafka(k KafkaConfig, cs *checks) {
	if len(k.Brokers) == 0 {
		cs.Wrap("Kafka.Brokers", ErrRequired)
	}
	for _, b := range k.Brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			cs.Fail("Kafka.Brokers", nil, "%q is not host:port", b)
		}
	}
	if k.MetadataTTL <= 0 {
		cs.Fail("Kafka.MetadataTTL", k.MetadataTTL, "use a positive duration")
	}
	if k.SessionLifetime < 0 || (k.SessionLifetime > 0 && k.SessionLifetime < 5*time.Second) {
		cs.Fail("Kafka.SessionLifetime", k.SessionLifetime, "use zero (token expiry only) or at least 5s")
	}
}

func (p PublishConfig) validate(cs *checks, out *compiled) {
	if t, err := publisher.ParseTopicTemplate(p.TopicTemplate); err != nil {
		cs.Wrap("Publish.TopicTemplate", err)
	} else {
		out.template = t
	}
	if p.MaxBatch < 1 || p.MaxBatch > 100000 {
		cs.Fail("Publish.MaxBatch", p.MaxBatch, "use 1..100000")
	}
	if p.Linger > time.Second {
		cs.Fail("Publish.Linger", p.Linger, "use at most 1s (5ms, like the Java producer's linger.ms, is the default; negative sends at once)")
	}
	if p.MaxBatchBytes < 1024 {
		cs.Fail("Publish.MaxBatchBytes", p.MaxBatchBytes, "use at least 1024")
	}
	if p.BackoffBase <= 0 {
		cs.Fail("Publish.BackoffBase", p.BackoffBase, "use a positive duration")
	} else if p.BackoffMax < p.BackoffBase {
		cs.Fail("Publish.BackoffMax", p.BackoffMax, "use at least Publish.BackoffBase (%s)", p.BackoffBase)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"Publish.UnknownTopicTimeout", p.UnknownTopicTimeout}, {"Publish.PartitionRefresh", p.PartitionRefresh}, {"Publish.TopicIdleTimeout", p.TopicIdleTimeout},
		{"Publish.WriteTimeout", p.WriteTimeout}, {"Publish.MetadataTimeout", p.MetadataTimeout}} {
		if d.v <= 0 {
			cs.Fail(d.field, d.v, "use a positive duration")
		}
	}
	if p.TopicPartitions < 1 {
		cs.Fail("Publish.TopicPartitions", p.TopicPartitions, "use at least 1")
	}
	if p.TopicReplicationFactor < -1 || p.TopicReplicationFactor > math.MaxInt16 {
		cs.Fail("Publish.TopicReplicationFactor", p.TopicReplicationFactor, "use -1 (the brokers' default) or 1..%d", math.MaxInt16)
	}
	// In every delivery mode: at-least-once refuses rows routed to it too.
	if p.PositionsTopic != "" {
		if err := record.ValidTopic(p.PositionsTopic); err != nil {
			cs.Wrap("Publish.PositionsTopic", err)
		}
	}
	p.validateDelivery(cs)
	if pol, err := poison.ParsePolicy(string(p.PoisonPolicy)); err != nil {
		cs.Wrap("Publish.PoisonPolicy", err)
	} else {
		out.policy = pol
	}
	format, err := record.ParseFormat(string(p.Record.Format))
	if err != nil {
		cs.Fail("Publish.Record.Format", string(p.Record.Format), "use native, debezium, cloudevents, avro, protobuf or json-schema")
	}
	p.validateRegistry(cs, format)
	if _, err := record.ParseCloudEventsMode(string(p.Record.CloudEventsMode)); err != nil {
		cs.Fail("Publish.Record.CloudEventsMode", string(p.Record.CloudEventsMode), "use binary or structured")
	}
	if format == record.FormatCloudEvents {
		switch err := record.CheckCloudEventsSource(p.Record.CloudEventsSource); {
		case p.Record.CloudEventsSource == "":
			cs.Fail("Publish.Record.CloudEventsSource", nil, "is required with Publish.Record.Format cloudevents: a URI-reference naming the producer, e.g. /orders-service")
		case err != nil:
			cs.Wrap("Publish.Record.CloudEventsSource", err)
		}
	}
}

func (w WindowConfig) validate(cs *checks, p PublishConfig) {
	if w.MaxEvents < 1 {
		cs.Fail("Window.MaxEvents", w.MaxEvents, "use at least 1")
	}
	if w.MaxBytes < int64(p.MaxBatchBytes) {
		cs.Fail("Window.MaxBytes", w.MaxBytes, "use at least Publish.MaxBatchBytes (%d)", p.MaxBatchBytes)
	}
}

// connectOptions are the replication connections' options: the
// BeforeConnect hook, if any.
// replicationURL is where the replication stream connects: the standby of
// ReplicationURL, or URL.
func (d DatabaseConfig) replicationURL() string {
	if d.ReplicationURL != "" {
		return d.ReplicationURL
	}
	return d.URL
}

func (d DatabaseConfig) connectOptions() []replication.Option {
	return []replication.Option{replication.WithBeforeConnect(d.BeforeConnect)} // nil: none
}

// elector is the election configuration of the leader's lock.
func (l LeaderConfig) elector(d DatabaseConfig) leader.Config {
	return leader.Config{
		DatabaseURL: d.URL, Slot: d.Slot, BeforeConnect: d.BeforeConnect,
		PollInterval: l.PollInterval, KeepaliveInterval: l.KeepaliveInterval, Timeout: l.Timeout,
	}
}

// validate applies package leader's rules between the intervals.
func (l LeaderConfig) validate(cs *checks, d DatabaseConfig) {
	err := l.elector(d).Validate()
	if err == nil {
		return
	}
	for _, e := range unjoin(err) {
		cs.Wrap("Leader", e)
	}
}

func (c CleanupConfig) validate(cs *checks) {
	// A negative interval is an explicit 0 (the CLI's): never a cadence,
	// even with cleanup off, where it would be ignored silently.
	if c.Interval < 0 || c.OlderThan > 0 && c.Interval < 100*time.Millisecond {
		cs.Fail("Cleanup.Interval", c.Interval, "use at least 100ms (minutes are typical)")
	}
}

func (s StatsConfig) validate(cs *checks) {
	if s.Interval > 0 && s.Interval < 100*time.Millisecond {
		cs.Fail("Stats.Interval", s.Interval, "use at least 100ms (15s is plenty for dashboards; negative turns the statistics off)")
	}
	if s.WALDiskBudget < 0 {
		cs.Fail("Stats.WALDiskBudget", s.WALDiskBudget, "use 0 (none) or the bytes of WAL the server can hold, e.g. 10737418240 for 10 GiB")
	}
}

// unjoin lists the errors err joins (err itself when it joins none;
// none for nil).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// validateDelivery checks the delivery guarantee and, for exactly-once,
// its transaction settings.
func (p PublishConfig) validateDelivery(cs *checks) {
	switch p.Delivery {
	case AtLeastOnce:
		return
	case ExactlyOnce:
	default:
		cs.Fail("Publish.Delivery", string(p.Delivery), "use %s or %s", AtLeastOnce, ExactlyOnce)
		return
	}
	if p.NoIdempotence {
		cs.Fail("Publish.NoIdempotence", p.NoIdempotence, "exactly-once writes with a transactional producer, which is idempotent: leave Publish.NoIdempotence false")
	}
	if p.TransactionInterval < time.Millisecond || p.TransactionInterval > time.Minute {
		cs.Fail("Publish.TransactionInterval", p.TransactionInterval, "use 1ms..1m (1ms, group commit, is the default)")
	}
	if p.TransactionTimeout < time.Second || p.TransactionTimeout < 10*p.TransactionInterval {
		cs.Fail("Publish.TransactionTimeout", p.TransactionTimeout, "use at least 1s and 10 times Publish.TransactionInterval (%s)", p.TransactionInterval)
	}
	if p.TransactionTimeout > 15*time.Minute {
		cs.Fail("Publish.TransactionTimeout", p.TransactionTimeout, "use at most 15m, the brokers' default transaction.max.timeout.ms")
	}
	if p.PositionsTopic == "" {
		cs.Wrap("Publish.PositionsTopic", ErrRequired)
	}
}

// validateRegistry checks the registry formats' settings: the registry's
// with one of them, and none without (a setting that would be ignored is
// refused).
func (p *PublishConfig) validateRegistry(cs *checks, format record.Format) {
	r := p.Record
	if _, err := record.ParseSubjectStrategy(string(r.SubjectStrategy)); err != nil {
		cs.Fail("Publish.Record.SubjectStrategy", string(r.SubjectStrategy), "use topic, record or topic-record")
	}
	if _, err := record.ParseSchemaVersionSource(string(r.SchemaVersion)); err != nil {
		cs.Fail("Publish.Record.SchemaVersion", string(r.SchemaVersion), "use row or latest")
	}
	if r.KeySchema && format == record.FormatProtobuf {
		cs.Fail("Publish.Record.KeySchema", nil, "%v", record.CheckKeySchema(format))
	}
	if format.Registry() {
		cs.Nested("Publish.Record.Registry", r.Registry.Validate())
		return
	}
	unused := func(field string, value any) {
		cs.Fail(field, value, "is only used with a registry format (Publish.Record.Format avro, protobuf or json-schema; it is %s)", format)
	}
	if r.SubjectStrategy != "" && r.SubjectStrategy != record.SubjectTopic {
		unused("Publish.Record.SubjectStrategy", string(r.SubjectStrategy))
	}
	if r.SchemaVersion != "" && r.SchemaVersion != record.VersionFromRow {
		unused("Publish.Record.SchemaVersion", string(r.SchemaVersion))
	}
	if r.Registry.URL != "" {
		unused("Publish.Record.Registry.URL", nil)
	}
	if r.KeySchema {
		unused("Publish.Record.KeySchema", nil)
	}
}
