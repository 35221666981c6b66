// Package migrations owns the schema of the outbox table: the SQL that
// creates it, the bookkeeping that makes creating it repeatable, and the
// validation that tells the relay whether a table (created by us or by the
// application) has the columns the replication decoder relies on.
//
// The table name is configurable, so the SQL files embedded from
// migrations/*.sql are text/template documents rendered with the already
// quoted identifier ({{.Table}}). Each file is named NNNN_description.sql;
// NNNN is the migration version. Versions are recorded per table in
// outbox_relay_schema_migrations, which lives in the same schema as the
// outbox table so that dropping the schema drops the bookkeeping with it.
//
// Apply is safe to run concurrently from several processes (for example a
// migrate step in every replica's start-up): each migration runs in its own
// transaction under a transaction-scoped advisory lock, and a migration that
// another process recorded while we waited is skipped.
//
// Apply never creates the publication or the replication slot; those belong
// to the replication side (package slot), which needs them to match its own
// configuration.
package migrations
