-- Migration 2: the dead-letter table of the relay.
--
-- A poison event (one Kafka will never accept, or one that cannot become a
-- record) is written here with status 'dead' before the slot is confirmed
-- past it; every later event of its aggregate is written here with status
-- 'parked', in commit order, until an operator retries or discards the
-- poison event (outbox-relay dlq ...). The event is kept whole: the payload
-- as raw bytes, the headers as the text the outbox row held.
--
-- Shared by all outbox tables of the schema: rows name their outbox table.
CREATE TABLE IF NOT EXISTS {{.DeadLetter}} (
    outbox_table      text NOT NULL,
    event_id          text NOT NULL,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    aggregate_version bigint,
    event_type        text,
    schema_version    int,
    payload           bytea,
    headers           text,
    topic             text,
    tx_lsn            pg_lsn NOT NULL,
    tx_ordinal        int NOT NULL,
    commit_time       timestamptz,
    status            text NOT NULL CHECK (status IN ('dead', 'parked', 'published', 'discarded')),
    reason            text NOT NULL,
    class             text NOT NULL,
    attempts          int NOT NULL DEFAULT 1,
    first_failed_at   timestamptz NOT NULL DEFAULT now(),
    last_failed_at    timestamptz NOT NULL DEFAULT now(),
    resolved_at       timestamptz,
    resolution        text,
    PRIMARY KEY (outbox_table, event_id)
);

-- The quarantine lookups: open rows of one aggregate, in commit order.
-- Created only when missing: the table is shared by every outbox table of the
-- schema, and CREATE INDEX takes a SHARE lock on it (blocking every relay's
-- dead-letter writes) before IF NOT EXISTS finds the index there.
DO $$
BEGIN
    IF to_regclass({{.SchemaLit}} || '.outbox_dead_letter_open') IS NULL THEN
        CREATE INDEX IF NOT EXISTS outbox_dead_letter_open
            ON {{.DeadLetter}} (outbox_table, aggregate_type, aggregate_id, tx_lsn, tx_ordinal)
            WHERE status IN ('dead', 'parked');
    END IF;
END $$;
