package doctor

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Options are what `outbox-relay doctor` checks besides PostgreSQL's
// settings: standbys, topics, transactions and retention.
type Options struct {
	Target Target
	// Standbys are the URLs of the standbys whose failover chain is
	// checked; BeforeConnect sets their credentials, as the primary's.
	Standbys      []string
	BeforeConnect func(context.Context, *pgconn.Config) error
	// Decoding is the hot standby the relay decodes from
	// (--replication-url), when it does; Target.SlotDB is its connection.
	Decoding *Standby
	// Topics are checked; empty: those the outbox's events go to
	// (Render over the outbox Table's event types).
	Topics []string
	Table  migrations.Table
	Render func(aggregateType, eventType string) string
	// Kafka is where and how to reach the brokers (its Topics are set
	// here).
	Kafka KafkaTarget
	// Transactions, when set, checks exactly-once delivery: the
	// transactional id comes from TransactionalID, which reads the
	// source's identity.
	Transactions    *TransactionTarget
	TransactionalID func(ctx context.Context, db *pgxpool.Pool) (string, error)
	// Retention are the retention periods compared (the Kafka topics'
	// are read here).
	Retention Retention
	// Registry, with a registry record format, checks the subjects and
	// versions of the outbox's events.
	Registry *RegistryTarget
}

// Run runs every check on pool, the primary, and returns the report. An
// error means a check could not run at all.
func Run(ctx context.Context, pool *pgxpool.Pool, o Options) (*Report, error) {
	rep := &Report{}
	CheckPostgres(ctx, pool, o.Target, rep)
	standbys := make([]Standby, len(o.Standbys))
	for i, u := range o.Standbys {
		var closeStandby func()
		standbys[i], closeStandby = OpenStandby(ctx, u, o.BeforeConnect)
		defer closeStandby()
	}
	CheckFailover(ctx, pool, o.Target, standbys, rep)
	if o.Decoding != nil {
		CheckDecodingStandby(ctx, pool, o.Target, *o.Decoding, rep)
	}
	kt := o.Kafka
	kt.Topics = o.Topics
	if len(kt.Topics) == 0 {
		kt.Topics = OutboxTopics(ctx, pool, o.Table, o.Render)
	}
	CheckKafka(ctx, kt, rep)
	if o.Registry != nil {
		CheckRegistry(ctx, pool, o.Table, o.Render, *o.Registry, rep)
	}
	if o.Transactions != nil {
		id, err := o.TransactionalID(ctx, pool)
		if err != nil {
			return nil, fmt.Errorf("the default transactional id carries the source: %w", err)
		}
		tt := *o.Transactions
		tt.TransactionalID = id
		CheckTransactions(ctx, kt, tt, rep)
	}
	ret := o.Retention
	ret.Kafka, ret.KafkaInfinite, _ = KafkaRetention(ctx, kt)
	CheckRetention(ret, rep)
	return rep, nil
}
