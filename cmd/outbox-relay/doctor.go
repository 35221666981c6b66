package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/doctor"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/relay"
)

// doctorSummary is doctor's --help text.
const doctorSummary = "Checks wal_level, max_replication_slots, max_wal_senders, max_slot_wal_keep_size, wal_sender_timeout,\n" +
	"the publication (table set, publish = 'insert'), the role's privileges (REPLICATION and the grants\n" +
	"migrate --grant-role gives; superuser warns), the slot (plugin, wal_status, lag), Kafka reachability,\n" +
	"the idempotent producer (with --idempotent, that the principal gets a producer id: InitProducerId),\n" +
	"each topic's partitions, replication factor (3 recommended), min.insync.replicas (2),\n" +
	"unclean.leader.election.enable (false) and retention.ms, and prints each finding with its fix.\n" +
	"With --delivery exactly-once it also checks the transactional id (DESCRIBE: FindCoordinator; WRITE: an\n" +
	"AddPartitionsToTxn under producer id -1, which the coordinator refuses unchanged; never InitProducerId,\n" +
	"which would fence a running relay), WRITE on the positions and outbox topics in a transaction, the brokers'\n" +
	"transaction.state.log.replication.factor (3) and transaction.state.log.min.isr (2), transaction.max.timeout.ms\n" +
	"against --transaction-timeout, and the positions topic (cleanup.policy=compact, READ, replication; when\n" +
	"missing, whether the relay may create it).\n" +
	"Exit code 1 when any check fails, 4 when the checks could not run (PostgreSQL unreachable or\n" +
	"refusing the connection).\n" +
	"On PostgreSQL 17+ it also checks the slot's failover chain: the slot's failover flag, the primary's\n" +
	"synchronized_standby_slots (existing, active physical slots) and, on each --standby-url, recovery,\n" +
	"system identifier, sync_replication_slots, hot_standby_feedback, primary_slot_name (named in\n" +
	"synchronized_standby_slots), a dbname in primary_conninfo, wal_level and the slot's synchronized copy\n" +
	"(synced, failover, persistent). A gap fails when the slot has failover = true and warns otherwise;\n" +
	"failover = false fails when --standby-url is given. Before 17 a standby gets the checks that exist there."

// doctorCommand checks PostgreSQL's settings, the publication, the slot and
// the Kafka topics and prints pass/warn/fail findings with their fixes; a
// fail exits 1, a database it cannot connect to (nothing checked) exits 4.
func doctorCommand() command {
	return command{name: "doctor", summary: doctorSummary, scope: scopeDB | scopeKafka, bind: func(b *envflag.Binder) body {
		var topics string
		var standbyURLs []string
		var dedupe, outboxRetention, cpRetention time.Duration
		b.ConnStrings(&standbyURLs, "standby-url", "a standby to check the failover chain on, as a URL like --database-url; repeatable, or comma-separated")
		b.String(&topics, "topics", "", "comma-separated topics to check (default: the template rendered for event types found in the outbox)")
		b.Duration(&dedupe, "consumer-dedupe-retention", 0, "how long consumers remember event ids; warns when a topic retains records longer (0 skips)")
		b.Duration(&outboxRetention, "cleanup-older-than", 0, "the outbox retention (run --cleanup-older-than or your cleanup job's --older-than), checked against the other retention periods (0: no cleanup)")
		b.Duration(&cpRetention, "checkpoint-retention", 7*24*time.Hour, "the relay's --checkpoint-retention, checked against the other retention periods (0: kept for ever)")
		return func(ctx context.Context, x *invocation) error {
			cfg, stdout := x.cfg, x.stdout
			for i, u := range standbyURLs {
				if _, err := outboxdb.ParseConfig(u); err != nil {
					return configError{fmt.Errorf("--standby-url #%d: %w", i+1, err)}
				}
			}
			rep := &doctor.Report{}
			pool, err := connectPool(ctx, cfg)
			if err != nil {
				return notCheckedError{err}
			}
			defer pool.Close()
			target := doctor.Target{
				Slot: cfg.Relay.Database.Slot, Publication: cfg.Relay.Database.Publication, Schema: cfg.table.Schema, Table: cfg.table.Name,
				Cleanup: outboxRetention > 0,
			}
			doctor.CheckPostgres(ctx, pool, target, rep)
			standbys := make([]doctor.Standby, len(standbyURLs))
			for i, u := range standbyURLs {
				var closeStandby func()
				standbys[i], closeStandby = doctor.OpenStandby(ctx, u, cfg.Relay.Database.BeforeConnect)
				defer closeStandby()
			}
			doctor.CheckFailover(ctx, pool, target, standbys, rep)

			names := doctor.SplitTopics(topics)
			if len(names) == 0 {
				names = doctor.OutboxTopics(ctx, pool, cfg.table, cfg.template.Render)
			}
			kt := doctor.KafkaTarget{Brokers: cfg.Relay.Kafka.Brokers, Topics: names, DedupeRetention: dedupe,
				Idempotent: !cfg.Relay.Publish.NoIdempotence,
				Client:     func() (*kafka.Client, func()) { return cfg.kafkaClient("outbox-relay-doctor", 10*time.Second) }}
			doctor.CheckKafka(ctx, kt, rep)
			if p := cfg.Relay.Publish; p.Delivery == relay.ExactlyOnce {
				src, err := relay.LookupSource(ctx, pool, cfg.Relay.Database.Slot)
				if err != nil {
					return notCheckedError{fmt.Errorf("the default transactional id carries the source: %w", err)}
				}
				doctor.CheckTransactions(ctx, kt, doctor.TransactionTarget{
					TransactionalID: cfg.Relay.TransactionalID(src), PositionsTopic: p.PositionsTopic, Timeout: p.TransactionTimeout,
				}, rep)
			}
			ret := doctor.Retention{Outbox: outboxRetention, Checkpoint: cpRetention, Dedupe: dedupe}
			ret.Kafka, ret.KafkaInfinite, _ = doctor.KafkaRetention(ctx, kt)
			doctor.CheckRetention(ret, rep)
			// Findings may quote library errors, which name relay.Config fields.
			var out strings.Builder
			rep.Write(&out)
			io.WriteString(stdout, cfg.text(out.String()))
			if rep.Failed() {
				return errors.New("some checks failed (see the fixes above)")
			}
			return nil
		}
	}}
}

// notCheckedError is a failure before any check ran (exit 4): a monitor
// running doctor can tell "the set-up is wrong" (exit 1) from "doctor
// could not look" (exit 4).
type notCheckedError struct{ err error }

func (e notCheckedError) Error() string { return e.err.Error() }
func (e notCheckedError) Unwrap() error { return e.err }
