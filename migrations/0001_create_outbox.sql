-- Migration 1: the outbox table.
--
-- Rendered with text/template: .Table is the quoted, schema-qualified table
-- name and .PayloadType is jsonb (default) or bytea. .NullablePayload
-- leaves NOT NULL off the payload (for tombstones: docs/formats.md).
--
-- IF NOT EXISTS: the application may have created the table itself (for
-- example from its own migration tool); Apply validates the existing table
-- afterwards instead of failing here.
--
-- No secondary index: rows are read from the WAL, never queried, so an
-- index on (aggregate_type, aggregate_id, aggregate_version) would only add
-- write amplification to every producer transaction. Add one yourself if
-- you query the table or want a unique constraint on aggregate versions.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    event_id          uuid PRIMARY KEY,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    aggregate_version bigint NOT NULL,
    event_type        text NOT NULL,
    schema_version    int NOT NULL,
    payload           {{.PayloadType}}{{if not .NullablePayload}} NOT NULL{{end}},
    headers           jsonb,
    created_at        timestamptz NOT NULL DEFAULT now()
);
