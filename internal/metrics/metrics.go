// Package metrics defines the relay's Prometheus metrics. A Relay holds
// every collector and is passed explicitly to the parts that update it;
// nothing is registered globally.
package metrics

import (
	"fmt"
	"net/http"

	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const namespace = "outbox_relay"

// Relay is the set of relay metrics. Labels are bounded: topics and error
// reasons, never aggregates or events.
type Relay struct {
	// Registry is the private registry of New (with the Go and process
	// collectors); nil for Register, whose caller serves its own.
	Registry *prometheus.Registry
	// Registerer is where the collectors are registered: Registry, or
	// Register's reg. Collectors created later (NewCleanup) go there too.
	Registerer prometheus.Registerer

	// BuildInfo is always 1; its labels say which build runs (version,
	// revision, goversion), the Prometheus convention for joining a
	// version onto other series.
	BuildInfo prometheus.Gauge

	EventsPublished   *prometheus.CounterVec // by topic
	BatchesPublished  prometheus.Counter
	PublishAttempts   prometheus.Counter
	PublishErrors     *prometheus.CounterVec // by reason, class
	CommitToAck       prometheus.Histogram
	CommitToDecode    prometheus.Histogram
	InflightEvents    prometheus.Gauge
	InflightBytes     prometheus.Gauge
	OldestUnackedAge  prometheus.Gauge
	ConfirmedLSN      prometheus.Gauge
	StatusUpdates     prometheus.Counter
	LastStatusTime    prometheus.Gauge
	ReplicationUp     prometheus.Gauge
	ReplicationStarts prometheus.Counter
	DecodedEvents     prometheus.Counter
	DeadLettered      prometheus.Counter
	Parked            prometheus.Counter
	Quarantined       prometheus.Gauge
	CheckpointSaves   prometheus.Counter
	CheckpointLSN     prometheus.Gauge
	CheckpointSkipped prometheus.Counter
	// CheckpointSaveFailures and CheckpointHeld: see New's help texts.
	CheckpointSaveFailures prometheus.Counter
	CheckpointHeld         prometheus.Gauge
	// EventsRedelivered counts events handed to the publisher again after
	// a restart or failover that an earlier run had handed to it already
	// (possible duplicates; see docs/observability.md for how exact it is).
	EventsRedelivered prometheus.Counter
	// TopicPartitionChanges counts partition-count changes of a topic the
	// relay switched to, by topic (each switch waited until the topic's
	// earlier events were acknowledged, so keys moved without reordering).
	TopicPartitionChanges *prometheus.CounterVec // by topic
	// MetadataRefreshFailures counts the publisher's own metadata
	// questions (a topic's partitions and leaders, the positions topic's
	// partition count) that failed, by reason; the layout known before
	// stays in use meanwhile.
	MetadataRefreshFailures *prometheus.CounterVec // by reason
	// Transactions counts exactly-once Kafka transactions by outcome
	// (committed, aborted); TransactionDuration observes a committed
	// one from its first event to its commit, TransactionCommit the
	// commit alone, TransactionEvents its size; ProducerFenced counts
	// refusals because a newer producer took the transactional id over.
	Transactions        *prometheus.CounterVec // by outcome
	TransactionDuration prometheus.Histogram
	TransactionCommit   prometheus.Histogram
	TransactionEvents   prometheus.Histogram
	ProducerFenced      prometheus.Counter

	// Leader is 1 while this process holds the slot's leader lock (and
	// streams or is about to), 0 as a standby.
	Leader prometheus.Gauge
	// LeaderAcquisitions counts the times this process became leader.
	LeaderAcquisitions prometheus.Counter
	// Stalled is 1 while events are in flight and Kafka has acknowledged
	// none of them for --stall-timeout (see relay/stalldetector.go).
	Stalled prometheus.Gauge

	// PostgreSQL-side statistics, read by package pgstats every
	// --stats-interval in every run process (standbys too: with the leader
	// dead they are the ones still reporting a growing lag). Labelled by
	// slot or table (one value per process), so dashboards can take
	// max by (slot) across the leader and its standbys.
	PG PGStats

	// SchemaRegistry is the schema registry client's, for the registry
	// formats (see SchemaRegistryClient).
	SchemaRegistry SchemaRegistry
}

// PGStats are the slot and outbox-table gauges of package pgstats. A gauge
// without a value (slot missing, safe_wal_size unlimited, no forecast) has
// no series, rather than a made-up number.
type PGStats struct {
	// SlotExists is 1 while the slot is in pg_replication_slots.
	SlotExists *prometheus.GaugeVec // slot
	// SlotActive is 1 while a walsender streams from the slot.
	SlotActive *prometheus.GaugeVec // slot
	// SlotLag is pg_current_wal_lsn() - confirmed_flush_lsn: WAL the relay
	// has not confirmed yet.
	SlotLag *prometheus.GaugeVec // slot
	// SlotRetainedWAL is pg_current_wal_lsn() - restart_lsn: WAL the slot
	// keeps on the server's disk.
	SlotRetainedWAL *prometheus.GaugeVec // slot
	// SlotSafeWALSize is safe_wal_size: bytes that can still be written
	// before the slot is invalidated; no series when unlimited.
	SlotSafeWALSize *prometheus.GaugeVec // slot
	// SlotWALStatus is 1 for the slot's current wal_status, 0 for the others.
	SlotWALStatus *prometheus.GaugeVec // slot, status
	// SlotWALExhaustion forecasts the seconds until the retained WAL
	// reaches safe_wal_size or the disk budget (see walforecast.Forecast).
	SlotWALExhaustion *prometheus.GaugeVec // slot
	// StandbyReplayLag is, when the relay decodes on a hot standby, the
	// WAL the primary wrote and the standby has not replayed: delivery
	// waits for it before the slot's own lag. No series on a primary.
	StandbyReplayLag *prometheus.GaugeVec // slot
	// TableBytes is pg_total_relation_size of the outbox table.
	TableBytes *prometheus.GaugeVec // table
	// TableLiveTuples and TableDeadTuples are n_live_tup and n_dead_tup.
	TableLiveTuples *prometheus.GaugeVec // table
	TableDeadTuples *prometheus.GaugeVec // table
	// TableLastAutovacuum is last_autovacuum as Unix time; no series
	// before the first autovacuum.
	TableLastAutovacuum *prometheus.GaugeVec // table
	// ScrapeErrors counts failed statistics queries, by source (slot or
	// table). A failure never stops the relay.
	ScrapeErrors *prometheus.CounterVec // source
}

// WALStatuses are the values of pg_replication_slots.wal_status.
var WALStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// Stats sources, the values of outbox_relay_stats_scrape_errors_total's
// source label.
const (
	SourceSlot  = "slot"
	SourceTable = "table"
)

func newPGStats() PGStats {
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: name, Help: help}, labels)
	}
	s := PGStats{
		SlotExists: gauge("slot_exists", "1 while the replication slot exists, 0 when it is missing.", "slot"),
		SlotActive: gauge("slot_active", "1 while a walsender streams from the slot (pg_replication_slots.active).", "slot"),
		SlotLag: gauge("slot_lag_bytes",
			"WAL bytes between pg_current_wal_lsn() and the slot's confirmed_flush_lsn: written but not yet confirmed by the relay.", "slot"),
		SlotRetainedWAL: gauge("slot_retained_wal_bytes",
			"WAL bytes between pg_current_wal_lsn() and the slot's restart_lsn: what the slot keeps on the server's disk.", "slot"),
		SlotSafeWALSize: gauge("slot_safe_wal_size_bytes",
			"safe_wal_size: WAL bytes that can still be written before the slot is invalidated (max_slot_wal_keep_size); "+
				"no series when unlimited or lost.", "slot"),
		SlotWALStatus: gauge("slot_wal_status",
			"1 for the slot's current wal_status (reserved, extended, unreserved, lost), 0 for the others.", "slot", "status"),
		StandbyReplayLag: gauge("standby_replay_lag_bytes",
			"WAL bytes the primary has written and the hot standby the relay decodes from has not replayed yet: delivery waits for them, "+
				"before the slot's lag on the standby (outbox_relay_slot_lag_bytes). No series when the relay decodes on the primary.", "slot"),
		SlotWALExhaustion: gauge("slot_wal_exhaustion_seconds",
			"Forecast seconds until the slot's retained WAL reaches safe_wal_size or Stats.WALDiskBudget, from its growth over "+
				"the last 5 minutes; +Inf while it does not grow, 0 when reached or lost, no series without a limit.", "slot"),
		TableBytes:      gauge("outbox_table_bytes", "pg_total_relation_size of the outbox table (with indexes and TOAST).", "table"),
		TableLiveTuples: gauge("outbox_table_live_tuples", "Estimated live rows of the outbox table (pg_stat_user_tables.n_live_tup).", "table"),
		TableDeadTuples: gauge("outbox_table_dead_tuples", "Estimated dead rows of the outbox table (pg_stat_user_tables.n_dead_tup).", "table"),
		TableLastAutovacuum: gauge("outbox_table_last_autovacuum_timestamp_seconds",
			"Unix time of the outbox table's last autovacuum; no series before the first.", "table"),
		ScrapeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "stats_scrape_errors_total",
			Help: "Failed PostgreSQL statistics queries, by source (slot, table); the relay goes on.",
		}, []string{"source"}),
	}
	for _, src := range []string{SourceSlot, SourceTable} {
		s.ScrapeErrors.WithLabelValues(src)
	}
	return s
}

func (s PGStats) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		s.SlotExists, s.SlotActive, s.SlotLag, s.SlotRetainedWAL, s.SlotSafeWALSize, s.SlotWALStatus, s.SlotWALExhaustion, s.StandbyReplayLag,
		s.TableBytes, s.TableLiveTuples, s.TableDeadTuples, s.TableLastAutovacuum, s.ScrapeErrors,
	}
}

// New creates the collectors and registers them, with the Go and process
// collectors, on a fresh registry.
func New() *Relay {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r, err := Register(reg)
	if err != nil {
		panic(err) // a fresh registry has no collector to collide with
	}
	r.Registry = reg
	return r
}

// Register creates the collectors and registers them on reg, without the
// Go and process collectors (a caller's registry usually has them). It
// fails when reg has outbox_relay_ collectors already, such as another
// relay's: give each its own registerer, e.g. with
// prometheus.WrapRegistererWith and a distinguishing label.
func Register(reg prometheus.Registerer) (*Relay, error) {
	r := &Relay{
		Registerer: reg,
		BuildInfo:  newBuildInfo(buildinfo.Read()),
		EventsPublished: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_published_total",
			Help: "Events acknowledged by Kafka, by topic.",
		}, []string{"topic"}),
		BatchesPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "batches_published_total",
			Help: "Partition batches acknowledged by Kafka.",
		}),
		PublishAttempts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "publish_attempts_total",
			Help: "Partition batch write attempts, including retries.",
		}),
		PublishErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "publish_errors_total",
			Help: "Failed partition batch writes, by reason and class (transient or permanent).",
		}, []string{"reason", "class"}),
		CommitToAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "commit_to_ack_seconds",
			Help:    "Time from the source transaction's commit to Kafka's acknowledgement of its event.",
			Buckets: []float64{.001, .0025, .005, .0075, .01, .015, .02, .025, .03, .04, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		CommitToDecode: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "commit_to_decode_seconds",
			Help: "Time from the source transaction's commit to the relay decoding its commit record, for transactions " +
				"with outbox events: the replication part of commit_to_ack_seconds (the rest is Kafka and the relay's queues).",
			Buckets: []float64{.001, .0025, .005, .0075, .01, .015, .02, .025, .03, .04, .05, .075, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		InflightEvents: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "inflight_events",
			Help: "Events read from the WAL and not yet acknowledged by Kafka.",
		}),
		InflightBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "inflight_bytes",
			Help: "Bytes of events read from the WAL and not yet acknowledged by Kafka.",
		}),
		OldestUnackedAge: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "oldest_unacknowledged_event_age_seconds",
			Help: "Age since commit of the oldest transaction with events not yet acknowledged by Kafka; 0 when none.",
		}),
		ConfirmedLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "confirmed_flush_lsn_bytes",
			Help: "Last flush position confirmed to PostgreSQL, as a byte position in the WAL.",
		}),
		StatusUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "status_updates_total",
			Help: "Standby status updates sent to PostgreSQL.",
		}),
		LastStatusTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "last_status_update_timestamp_seconds",
			Help: "Unix time of the last standby status update.",
		}),
		ReplicationUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "replication_connected",
			Help: "1 while the replication stream is open.",
		}),
		ReplicationStarts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "replication_starts_total",
			Help: "Replication streams started (1 plus reconnects).",
		}),
		DecodedEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_decoded_total",
			Help: "Outbox rows decoded from the WAL (redelivered ones included).",
		}),
		DeadLettered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_dead_lettered_total",
			Help: "Poison events written to the dead-letter table.",
		}),
		Parked: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_parked_total",
			Help: "Events parked behind a poison event of their aggregate.",
		}),
		Quarantined: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "quarantined_aggregates",
			Help: "Aggregates whose events are parked until an operator retries or discards their poison event.",
		}),
		CheckpointSaves: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "checkpoint_saves_total",
			Help: "Checkpoints (acknowledged positions) saved to the checkpoint table.",
		}),
		CheckpointLSN: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "checkpoint_lsn",
			Help: "LSN of the last saved checkpoint, as a number.",
		}),
		CheckpointSkipped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "checkpoint_skipped_events_total",
			Help: "Events not re-published at start because a checkpoint showed Kafka had acknowledged them (duplicates avoided).",
		}),
		CheckpointSaveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "checkpoint_save_failures_total",
			Help: "Checkpoint saves that failed or timed out. Each releases the acknowledgements held for it, so a crash " +
				"may then re-send more than the in-flight window.",
		}),
		CheckpointHeld: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "checkpoint_held_events",
			Help: "Acknowledged events of the oldest unconfirmed transaction that wait for a checkpoint save; " +
				"they take in-flight window space.",
		}),
		EventsRedelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "events_redelivered_total",
			Help: "Events published again after a restart or failover that an earlier run had already handed to Kafka " +
				"(above the checkpoint, at or below its saved decoded position): possible duplicates.",
		}),
		TopicPartitionChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "topic_partition_changes_total",
			Help: "Partition-count increases of a topic the relay switched to, after every earlier event of the topic " +
				"was acknowledged: keys may have moved to other partitions. A shrink stops the relay instead.",
		}, []string{"topic"}),
		MetadataRefreshFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "metadata_refresh_failures_total",
			Help: "Failed metadata questions of the publisher's own (a topic's partitions and leaders, the positions topic's " +
				"partition count), asked of a broker past kafka-go's cache, by reason; the layout known before stays in use meanwhile.",
		}, []string{"reason"}),
		Transactions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "transactions_total",
			Help: "Exactly-once Kafka transactions by outcome: committed, or aborted (abandoned with events in it at a stop or failure; " +
				"its events are published again from the last committed position).",
		}, []string{"outcome"}),
		TransactionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "transaction_duration_seconds",
			Help:    "Exactly-once transactions, from the first event to the end of the commit: what read_committed consumers wait on top of the publish.",
			Buckets: []float64{.01, .025, .05, .1, .15, .2, .3, .5, 1, 2.5, 5, 10, 30},
		}),
		TransactionCommit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "transaction_commit_seconds",
			Help:    "Exactly-once commits alone: the wait for the range's last records, the position record and EndTxn.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 10},
		}),
		TransactionEvents: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "transaction_events",
			Help:    "Events per committed exactly-once transaction.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		ProducerFenced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "producer_fenced_total",
			Help: "Kafka refused this relay's transactional producer because a newer one with the same transactional id took over " +
				"(another relay became leader): the relay stepped down from the stream.",
		}),
		Leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "leader",
			Help: "1 while this process holds the slot's leader lock and streams, 0 as a standby.",
		}),
		LeaderAcquisitions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "leader_acquisitions_total",
			Help: "Times this process acquired the slot's leader lock.",
		}),
		Stalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: namespace, Name: "stalled",
			Help: "1 while events are in flight and no acknowledgement advanced for the stall timeout; 0 otherwise.",
		}),
		PG:             newPGStats(),
		SchemaRegistry: newSchemaRegistry(),
	}
	cs := append([]prometheus.Collector{
		r.BuildInfo,
		r.EventsPublished, r.BatchesPublished, r.PublishAttempts, r.PublishErrors, r.CommitToAck, r.CommitToDecode,
		r.InflightEvents, r.InflightBytes, r.OldestUnackedAge, r.ConfirmedLSN,
		r.StatusUpdates, r.LastStatusTime, r.ReplicationUp, r.ReplicationStarts, r.DecodedEvents,
		r.DeadLettered, r.Parked, r.Quarantined,
		r.CheckpointSaves, r.CheckpointLSN, r.CheckpointSkipped, r.CheckpointSaveFailures, r.CheckpointHeld, r.EventsRedelivered, r.TopicPartitionChanges, r.MetadataRefreshFailures,
		r.Transactions, r.TransactionDuration, r.TransactionCommit, r.TransactionEvents, r.ProducerFenced,
		r.Leader, r.LeaderAcquisitions, r.Stalled,
	}, r.PG.collectors()...)
	cs = append(cs, r.SchemaRegistry.collectors()...)
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done) // all or nothing
			}
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return r, nil
}

// Handler serves g in the Prometheus exposition format. The handler's own
// errors are counted on the private registry of New; a caller's registry
// (Register) is left alone.
func (r *Relay) Handler(g prometheus.Gatherer) http.Handler {
	var opts promhttp.HandlerOpts
	if r.Registry != nil {
		opts.Registry = r.Registry
	}
	return promhttp.HandlerFor(g, opts)
}

// Cleanup is the metrics of the cleanup schedule the leader runs
// (run --cleanup-older-than); registered only when it is on.
type Cleanup struct {
	// DeletedRows counts outbox rows removed, by row deletes or with a
	// dropped partition.
	DeletedRows prometheus.Counter
	// Runs counts runs by result: ok, partial (stopped by its time
	// bound), refused (no usable checkpoint) or error.
	Runs *prometheus.CounterVec
}

// NewCleanup creates the cleanup collectors and registers them on reg.
func NewCleanup(reg prometheus.Registerer) *Cleanup {
	c := &Cleanup{
		DeletedRows: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "cleanup_deleted_rows_total",
			Help: "Outbox rows removed by the cleanup schedule (confirmed by a checkpoint and past the retention).",
		}),
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "cleanup_runs_total",
			Help: "Cleanup runs of the leader, by result: ok, partial, refused or error.",
		}, []string{"result"}),
	}
	for _, r := range []string{"ok", "partial", "refused", "error"} {
		c.Runs.WithLabelValues(r)
	}
	reg.MustRegister(c.DeletedRows, c.Runs)
	return c
}
