// Package pgstats reads the PostgreSQL side of the relay's health at a
// modest interval — the replication slot (pg_replication_slots against
// pg_current_wal_lsn()) and the outbox table (pg_stat_user_tables,
// pg_total_relation_size) — and sets the gauges in metrics.PGStats.
//
// Why a separate collector and not the stream: these numbers matter most
// when the relay is not streaming. While Kafka is down, or the leader is
// dead, the slot's lag and retained WAL grow, and the question operators
// ask is "how long until the slot is invalidated or the disk is full?".
// So every run process collects them, standbys and a leader waiting for
// Kafka too; dashboards take max by (slot) across them.
//
// The forecast (walforecast.Forecast, shared with the producer's
// back-pressure monitor in package outbox) divides the headroom —
// safe_wal_size and/or a configured disk budget minus the retained WAL,
// whichever is smaller — by the retained WAL's growth rate, a least-squares fit over the samples of
// the last Window (5 minutes by default). It is +Inf while the retained
// WAL does not grow, 0 once the headroom is used up (or the slot is lost),
// and absent when there is no limit to reach or fewer than two samples.
//
// A failed query is counted (outbox_relay_stats_scrape_errors_total) and
// logged, never fatal: statistics must not stop the relay. Every query has
// a bounded timeout.
package pgstats
