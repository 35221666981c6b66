package main

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/reconcile"
)

// errMissing makes the command exit 3: the comparison found missing events.
var errMissing = reconcile.ErrMissing

// reconcileCmd is reconcile; its options are reconcile.Config.
type reconcileCmd struct {
	config.LogFlags
	config.DBFlags
	config.KafkaFlags
	config.TopicFlags
	Since               time.Duration `name:"since" help:"range: events committed to the outbox in the last DURATION (required), e.g. 1h" to:"Options.Since"`
	Settle              time.Duration `name:"settle" default:"30s" help:"ignore events committed in the last DURATION: they may still be in flight (0: none, for a writer that has stopped)" to:"Options.Settle"`
	Consumer            string        `name:"consumer" help:"also check this inbox consumer's processed_events" to:"Options.Consumer"`
	ConsumerDatabaseURL string        `name:"consumer-database-url" help:"the consumer's database (default: --database-url)" to:"Options.ConsumerURL" secret:"dsn"`
	ConsumerSchema      string        `name:"consumer-schema" default:"public" help:"schema of the consumer's inbox tables" to:"Options.ConsumerSchema"`
	AggregateType       string        `name:"aggregate-type" help:"only events of this aggregate_type (e.g. the ones the consumer subscribes to)" to:"Options.AggregateType"`
	MaxList             int           `name:"max-list" default:"50" help:"most missing events listed per comparison (all are counted; 0: count only)" to:"Options.MaxList"`
	ReadTimeout         time.Duration `name:"read-timeout" default:"30s" help:"give up on a partition that yields no record for this long" to:"Options.ReadTimeout"`

	Options reconcile.Config `kong:"-"`
}

func (c *reconcileCmd) Run(ctx context.Context, x *invocation) error {
	cfg, stdout, o := x.cfg, x.stdout, c.Options
	if err := o.Validate(); err != nil {
		return configError{err}
	}
	var consumerHook func(context.Context, *pgconn.Config) error
	if o.ConsumerURL == "" {
		o.ConsumerURL, consumerHook = cfg.Relay.Database.URL, cfg.Relay.Database.BeforeConnect
	}
	o.Table, o.Template = cfg.Table(), cfg.Template()
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	rep, err := reconcile.Run(ctx, o, reconcile.Deps{Pool: pool, KafkaClient: cfg.KafkaClient, KafkaReader: cfg.KafkaReader, ConsumerBeforeConnect: consumerHook})
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
