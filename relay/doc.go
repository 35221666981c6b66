// Package relay streams a PostgreSQL transactional outbox to Kafka: the
// rows a service inserts into its outbox table, in the same transaction as
// its business data, become Kafka records keyed by aggregate, in commit
// order per aggregate, at least once.
//
// It reads the table's inserts through logical replication (a pgoutput
// slot), publishes them with acks=all and Java-compatible murmur2
// partitioning, and confirms the slot only past events Kafka has
// acknowledged: a crash, a failover or a Kafka outage never loses an
// event, and may re-send some (consumers deduplicate on the event_id
// header; package inbox does it for Go consumers).
//
// The binary cmd/outbox-relay is this package behind flags. A Go service
// can instead run the relay in-process beside its own handlers, with the
// same guarantees and no extra deployment.
//
// # Embedding
//
// Every replica of the service runs a Relay for the same slot. They elect
// a leader through a PostgreSQL advisory lock: the leader streams, the
// others stand by and take over within Leader.PollInterval when it stops
// or loses its connection. Run returns when its context ends, after
// draining what it read for at most ShutdownTimeout, and only once every
// goroutine it started (heartbeat, checkpoint saver, cleanup schedule,
// statistics, ...) has ended: nothing of it touches the database or Kafka
// afterwards, and a relay restarted in the same process never runs beside
// the loops of the one before:
//
//	var cfg relay.Config // zero fields mean their defaults
//	cfg.Database.URL = os.Getenv("DATABASE_URL")
//	cfg.Kafka.Brokers = []string{"127.0.0.1:9092"}
//	r, err := relay.New(cfg, relay.WithLogger(slog.Default()))
//	if err != nil {
//		log.Fatal(err) // every invalid field, each a *relay.FieldError
//	}
//	mux.Handle("/relay/", http.StripPrefix("/relay", r.Handler()))
//	go func() { errc <- r.Run(ctx) }() // one replica leads, the others stand by
//
// The outbox table, its publication and the slot are created by
// `outbox-relay migrate` (migrations.Apply creates the table alone);
// package outbox writes events into the table.
//
// On shutdown, stop taking requests first and cancel Run's context after
// that (give Run a context of its own, not the signal's): the leader then
// publishes what the last requests committed before it hands over, and the
// next leader re-sends nothing. Mount /relay/readyz for the relay's own
// health, not as the pod's readiness probe: a standby, or a leader waiting
// for Kafka, is "not ready" while the service's handlers work fine.
// examples/embedded is a complete service built this way.
//
// # Configuration
//
// Config groups the knobs by component. A zero field means its default
// (DefaultConfig returns them all), the convention of package outbox and
// package inbox too; a knob that can be turned off is off when negative
// (Database.HeartbeatInterval, Publish.Linger, Window.StallTimeout,
// Checkpoints.Interval and Retention, Stats.Interval; Cleanup.OlderThan is
// off by default). New validates everything up front
// and does no I/O; its error joins one *FieldError per invalid field,
// named by its Go path ("Publish.MaxBatch").
//
// Every message of the relay and of the packages under it - errors, log
// records, Readiness's Reason, the metrics' help, the fixes it suggests -
// names what to change the same way: "record of 2000000 bytes exceeds
// Publish.MaxBatchBytes 921600", "no acknowledgement for
// Window.StallTimeout". What is inside Kafka.TLS and Kafka.SASL is named
// below them: Kafka.TLS.RootCAs, Kafka.TLS.Certificates,
// Kafka.TLS.ServerName (the *tls.Config's fields), Kafka.SASL.Mechanism,
// Username and Password (what the sasl.Mechanism is built from). The
// binary prints its flags in their place (--max-batch-bytes); commands to
// run are named as such ("outbox-relay migrate --grant-role ROLE").
//
// Kafka is the one Kafka configuration: the relay's clients and those
// KafkaConfig builds for tools beside it (Transport, Dialer, Client,
// Reader) share its brokers, TLS and SASL.
//
// # Failures
//
// Transient failures - Kafka or PostgreSQL unreachable, a broken
// replication connection, a partition leader change - are retried with
// backoff and never lose the slot position. A poison event (one Kafka
// rejects for good, or that cannot become a record) is dead-lettered and
// its aggregate quarantined under poison.Quarantine, while the other
// aggregates flow on; under poison.Halt the relay stops. Failures no retry
// can cure (a schema problem, a dropped or invalidated slot, a rejected
// certificate or password) end Run with an error, the slot position held.
//
// # Observability
//
// Handler serves /healthz (liveness), /readyz (Readiness as JSON: 200 when
// ready) and /metrics (the outbox_relay_* series; see WithMetrics).
// Logs go to the slog.Logger of WithLogger, with a stage attribute on
// every record and event_id, aggregate_id and event_type for an event;
// payloads are never logged.
package relay
