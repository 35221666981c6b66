package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
)

// doctorCmd is doctor: it checks PostgreSQL's settings, the publication, the slot and
// the Kafka topics and prints pass/warn/fail findings with their fixes; a
// fail exits 1, a database it cannot connect to (nothing checked) exits 4.
type doctorCmd struct {
	config.LogFlags
	config.DBFlags
	config.StandbyFlags
	config.KafkaFlags
	config.TopicFlags
	config.ProducerFlags
	config.DeliveryFlags
	config.FormatFlags
	StandbyURL              []string      `name:"standby-url" help:"a standby to check the failover chain on, as a URL like --database-url; repeatable, or comma-separated" secret:"dsn"`
	Topics                  string        `name:"topics" help:"comma-separated topics to check (default: the template rendered for event types found in the outbox)"`
	ConsumerDedupeRetention time.Duration `name:"consumer-dedupe-retention" help:"how long consumers remember event ids; warns when a topic retains records longer (0 skips)"`
	CleanupOlderThan        time.Duration `name:"cleanup-older-than" help:"the outbox retention (run --cleanup-older-than or your cleanup job's --older-than), checked against the other retention periods (0: no cleanup)"`
	CheckpointRetention     time.Duration `name:"checkpoint-retention" default:"168h0m0s" help:"the relay's --checkpoint-retention, checked against the other retention periods (0: kept for ever)"`
}

func (c *doctorCmd) Run(ctx context.Context, x *invocation) error {
	cfg, stdout := x.cfg, x.stdout
	if f := cfg.Relay.Publish.Record.Format; f != record.FormatNative && !f.Registry() {
		return configError{fmt.Errorf("--record-format %s: doctor checks the registry formats (avro, protobuf, json-schema) only; leave it out", f)}
	}
	for i, u := range c.StandbyURL {
		// The shape first: pgconn's error would quote a value that is
		// no connection string, and it may be a password.
		if !outboxdb.ConnString(u) {
			return configError{fmt.Errorf("--standby-url #%d: must be a postgres:// URL or a key=value connection string, like --database-url", i+1)}
		}
		if _, err := outboxdb.ParseConfig(u); err != nil {
			return configError{fmt.Errorf("--standby-url #%d: %w", i+1, err)}
		}
	}
	pool, err := connectPool(ctx, cfg)
	if err != nil {
		return notCheckedError{err}
	}
	defer pool.Close()
	d, p := cfg.Relay.Database, cfg.Relay.Publish
	o := doctor.Options{
		Target: doctor.Target{Slot: d.Slot, Publication: d.Publication, Schema: cfg.Table().Schema, Table: cfg.Table().Name,
			Cleanup: c.CleanupOlderThan > 0},
		Standbys: c.StandbyURL, BeforeConnect: d.BeforeConnect,
		Topics: doctor.SplitTopics(c.Topics), Table: cfg.Table(), Render: cfg.Template().Render,
		Kafka: doctor.KafkaTarget{Brokers: cfg.Relay.Kafka.Brokers, DedupeRetention: c.ConsumerDedupeRetention,
			Idempotent: !p.NoIdempotence,
			Client:     func() (*kafka.Client, func()) { return cfg.KafkaClient("outbox-relay-doctor", 10*time.Second) }},
		Retention: doctor.Retention{Outbox: c.CleanupOlderThan, Checkpoint: c.CheckpointRetention, Dedupe: c.ConsumerDedupeRetention},
	}
	if p.Delivery == relay.ExactlyOnce {
		o.Transactions = &doctor.TransactionTarget{PositionsTopic: p.PositionsTopic, Timeout: p.TransactionTimeout}
		o.TransactionalID = func(ctx context.Context, db *pgxpool.Pool) (string, error) {
			sys, name, err := outboxdb.ServerSource(ctx, db)
			return cfg.Relay.TransactionalID(relay.Source{SystemID: sys, Database: name, Slot: d.Slot}), err
		}
	}
	if rc := p.Record; rc.Format.Registry() {
		schemas, err := kafkaclients.Schemas(rc)
		if err != nil {
			return configError{err}
		}
		o.Registry = &doctor.RegistryTarget{Record: rc, URL: rc.Registry.URL, Schemas: schemas}
	}
	if u := d.ReplicationURL; u != "" {
		s, closeStandby := doctor.OpenStandby(ctx, u, d.BeforeConnect)
		defer closeStandby()
		o.Decoding = &s
		if s.DB != nil {
			o.Target.SlotDB = s.DB
		}
	}
	rep, err := doctor.Run(ctx, pool, o)
	if err != nil {
		return notCheckedError{err}
	}
	// Findings may quote library errors, which name relay.Config fields.
	var out strings.Builder
	rep.Write(&out)
	io.WriteString(stdout, cfg.Text(out.String()))
	if rep.Failed() {
		return errors.New("some checks failed (see the fixes above)")
	}
	return nil
}

// notCheckedError is a failure before any check ran (exit 4): a monitor
// running doctor can tell "the set-up is wrong" (exit 1) from "doctor
// could not look" (exit 4).
type notCheckedError struct{ err error }

func (e notCheckedError) Error() string { return e.err.Error() }
func (e notCheckedError) Unwrap() error { return e.err }
