package main

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/reconcile"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

const reconcileSummary = `Compares the events committed to the outbox table in a time range with the
records in Kafka (read from the topics by timestamp) and, with --consumer, with
that consumer's inbox (processed_events). Prints counts per event type, lists
what is missing, and exits 3 when anything is missing (0 when nothing is, 1 on
errors). Memory is bounded: Kafka's event ids are streamed into a temporary
table and compared in SQL; the consumer is checked in chunks.`

// errMissing makes the command exit 3: the comparison found missing events.
var errMissing = reconcile.ErrMissing

func reconcileCommand() command {
	return command{name: "reconcile", summary: reconcileSummary, scope: scopeDB | scopeKafka, bind: func(b *envflag.Binder) body {
		var o reconcile.Config
		b.Duration(&o.Since, "since", 0, "range: events committed to the outbox in the last DURATION (required), e.g. 1h")
		b.Duration(&o.Settle, "settle", 30*time.Second, "ignore events committed in the last DURATION: they may still be in flight (0: none, for a writer that has stopped)")
		b.String(&o.Consumer, "consumer", "", "also check this inbox consumer's processed_events")
		b.ConnString(&o.ConsumerURL, "consumer-database-url", "", "the consumer's database (default: --database-url)")
		b.String(&o.ConsumerSchema, "consumer-schema", "public", "schema of the consumer's inbox tables")
		b.String(&o.AggregateType, "aggregate-type", "", "only events of this aggregate_type (e.g. the ones the consumer subscribes to)")
		b.Int(&o.MaxList, "max-list", 50, "most missing events listed per comparison (all are counted; 0: count only)")
		b.Duration(&o.ReadTimeout, "read-timeout", 30*time.Second, "give up on a partition that yields no record for this long")
		return func(ctx context.Context, x *invocation) error {
			cfg, stdout := x.cfg, x.stdout
			if err := o.Validate(); err != nil {
				return configError{err}
			}
			var consumerHook func(context.Context, *pgconn.Config) error
			if o.ConsumerURL == "" {
				o.ConsumerURL, consumerHook = cfg.Relay.Database.URL, cfg.Relay.Database.BeforeConnect
			}
			o.Table, o.Template = cfg.table, cfg.template
			pool, err := connectPool(ctx, cfg)
			if err != nil {
				return err
			}
			defer pool.Close()
			rep, err := reconcile.Run(ctx, o, reconcile.Deps{Pool: pool, KafkaClient: cfg.kafkaClient, KafkaReader: cfg.kafkaReader, ConsumerBeforeConnect: consumerHook})
			var ce *configerr.Error
			if errors.As(err, &ce) {
				return configError{ce.Err}
			}
			if err != nil {
				return err
			}
			rep.Write(stdout)
			return rep.Err()
		}
	}}
}
