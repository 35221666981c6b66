-- Migration 4: the decoded high-water position beside each checkpoint.
--
-- decoded_lsn is the highest TransactionEndLSN whose events the saving run
-- had handed to Kafka (decoded and queued for publishing) when it saved the
-- row; NULL when unknown (rows saved before this migration, or by
-- recover). After a restart or failover, the events the
-- next run publishes in transactions above lsn and at or below decoded_lsn
-- were possibly delivered already: outbox_relay_events_redelivered_total
-- counts them (docs/operations.md explains how exact that is).
--
-- One nullable column: older relays keep working against the table and
-- simply leave it NULL.
--
-- The ALTER runs only when the column is missing: ALTER TABLE takes an ACCESS
-- EXCLUSIVE lock on the shared checkpoint table even when IF NOT EXISTS makes
-- it a no-op, and every relay of the schema (and every statement queued
-- behind the lock request) would wait on it for each new outbox table.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = {{.CheckpointLit}}::regclass
            AND attname = 'decoded_lsn' AND NOT attisdropped) THEN
        ALTER TABLE {{.Checkpoint}} ADD COLUMN IF NOT EXISTS decoded_lsn pg_lsn;
    END IF;
END $$;
