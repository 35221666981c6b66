-- Migration 3: the relay's saved positions (checkpoints).
--
-- The running relay saves, at a bounded cadence, the position up to which
-- Kafka has acknowledged every event (the TransactionEndLSN it confirms to
-- the slot), with the commit time and xid of the last acknowledged
-- transaction and the identity of the server (system identifier, timeline)
-- the LSN belongs to. An LSN means nothing on another cluster or timeline,
-- so such a checkpoint is refused, never applied.
--
-- One row per slot and 10 seconds: the newest row is updated in place until
-- it is 10 s old (keeping its first fence), then a new row starts. The older rows are the history
-- that replay --from-lsn / --since maps to table rows, and are pruned
-- after the retention (outbox-relay run --checkpoint-retention).
--
-- The outbox rows carry no LSN, so a position is mapped to rows through a
-- fence: a snapshot taken while the server's WAL insert position was at or
-- before fence_lsn. Every transaction that commits after fence_lsn has an
-- xid >= fence_xmin; every transaction that committed before fence_lsn has
-- an xid < fence_xmax. fence_lsn <= lsn always, so the fence of a row is a
-- conservative bound for its position: selecting rows by it can only add
-- rows (duplicates), never miss one. NULL fences mean "unknown".
--
-- Shared by all outbox tables of the schema: rows name their outbox table.
CREATE TABLE IF NOT EXISTS {{.Checkpoint}} (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    outbox_table      text NOT NULL,
    slot              text NOT NULL,
    lsn               pg_lsn NOT NULL,
    commit_time       timestamptz,
    xid               bigint,
    system_identifier text NOT NULL,
    timeline          int NOT NULL,
    fence_lsn         pg_lsn,
    fence_xmin        bigint,
    fence_xmax        bigint,
    fence_at          timestamptz,
    started_at        timestamptz NOT NULL DEFAULT now(),
    saved_at          timestamptz NOT NULL DEFAULT now()
);

-- Created only when missing, as in migration 2: every relay of the schema
-- writes checkpoints here, and CREATE INDEX would block them all.
DO $$
BEGIN
    IF to_regclass({{.SchemaLit}} || '.outbox_relay_checkpoint_slot') IS NULL THEN
        CREATE INDEX IF NOT EXISTS outbox_relay_checkpoint_slot
            ON {{.Checkpoint}} (outbox_table, slot, id);
    END IF;
END $$;
