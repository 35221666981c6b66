-- Migration 5: positions that survive a crash inside a large transaction and
-- a dump and restore into another cluster.
--
-- partial_commit_lsn / partial_events / partial_acked: the transaction that
-- commits at partial_commit_lsn (the Begin message's final LSN) had its
-- first partial_events events, in ordinal order, and those partial_acked
-- marks past them (bit i of the bitmap, byte i/8 bit i%8, is ordinal
-- partial_events+i) acknowledged by Kafka (or settled in the dead-letter
-- table) when the row was saved. A relay that restarts inside that
-- transaction skips exactly those events when the slot replays it, so a
-- crash re-sends about the in-flight window, not the whole transaction.
-- NULL when no transaction was partly acknowledged.
--
-- system_identifier on dead-letter rows: the PostgreSQL system that wrote
-- the row. Row positions (tx_lsn, tx_ordinal) are LSNs of that system; after
-- a dump and restore into a new cluster LSNs start lower, so a row of
-- another system is treated as earlier than every new event of its
-- aggregate. NULL (rows written before this migration) counts as this
-- system.
--
-- Nullable columns only: older relays keep working against the tables.
--
-- Each ALTER runs only when its column is missing (the tables are shared by
-- the schema's outbox tables; see migration 4).
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_attribute WHERE attrelid = {{.CheckpointLit}}::regclass
            AND attname IN ('partial_commit_lsn', 'partial_events', 'partial_acked') AND NOT attisdropped) < 3 THEN
        ALTER TABLE {{.Checkpoint}} ADD COLUMN IF NOT EXISTS partial_commit_lsn pg_lsn;
        ALTER TABLE {{.Checkpoint}} ADD COLUMN IF NOT EXISTS partial_events int;
        ALTER TABLE {{.Checkpoint}} ADD COLUMN IF NOT EXISTS partial_acked bytea;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = {{.DeadLetterLit}}::regclass
            AND attname = 'system_identifier' AND NOT attisdropped) THEN
        ALTER TABLE {{.DeadLetter}} ADD COLUMN IF NOT EXISTS system_identifier text;
    END IF;
END $$;
