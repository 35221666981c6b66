package inbox

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Table names, created by Migrate in the configured schema. Every consumer
// of one database shares them; rows carry the consumer's name.
const (
	// ProcessedTable holds one row per event whose effect a consumer
	// applied (primary key consumer, event_id).
	ProcessedTable = "processed_events"
	// DeadLetterTable holds events a consumer could not apply (status
	// dead), the later events of their aggregates (parked) and how each was
	// resolved (applied, discarded).
	DeadLetterTable = "inbox_dead_letter"
	// migrationsTable records which inbox migrations ran.
	migrationsTable = "inbox_schema_migrations"
)

// migrationSteps are applied in order, each once, under an advisory lock.
// {schema} is replaced by the quoted schema. Append; never edit a step.
var migrationSteps = []string{
	// 1: processed events and the consumer-side dead-letter table.
	`CREATE TABLE IF NOT EXISTS {schema}.processed_events (
		consumer          text        NOT NULL,
		event_id          uuid        NOT NULL,
		aggregate_type    text        NOT NULL,
		aggregate_id      text        NOT NULL,
		aggregate_version bigint      NOT NULL,
		event_type        text        NOT NULL,
		topic             text        NOT NULL,
		kafka_partition   int         NOT NULL,
		kafka_offset      bigint      NOT NULL,
		processed_at      timestamptz NOT NULL DEFAULT now(),
		PRIMARY KEY (consumer, event_id)
	);
	CREATE INDEX IF NOT EXISTS processed_events_by_time ON {schema}.processed_events (consumer, processed_at);
	CREATE TABLE IF NOT EXISTS {schema}.inbox_dead_letter (
		consumer          text        NOT NULL,
		event_id          uuid        NOT NULL,
		seq               bigserial   NOT NULL,
		aggregate_type    text        NOT NULL,
		aggregate_id      text        NOT NULL,
		aggregate_version bigint      NOT NULL,
		event_type        text        NOT NULL,
		schema_version    int         NOT NULL,
		headers           jsonb,
		payload           bytea,
		topic             text        NOT NULL,
		kafka_partition   int         NOT NULL,
		kafka_offset      bigint      NOT NULL,
		record_time       timestamptz,
		status            text        NOT NULL CHECK (status IN ('dead', 'parked', 'applied', 'discarded')),
		reason            text        NOT NULL DEFAULT '',
		attempts          int         NOT NULL DEFAULT 0,
		first_failed_at   timestamptz NOT NULL DEFAULT now(),
		last_failed_at    timestamptz NOT NULL DEFAULT now(),
		resolved_at       timestamptz,
		resolution        text,
		PRIMARY KEY (consumer, event_id)
	);
	CREATE INDEX IF NOT EXISTS inbox_dead_letter_open ON {schema}.inbox_dead_letter (consumer, aggregate_type, aggregate_id, seq)
		WHERE status IN ('dead', 'parked');`,
}

// Migrate creates or upgrades the inbox tables in schema (created if
// missing; "" means "public"). It is idempotent and safe to run from every
// instance at start: concurrent runs serialize on an advisory lock.
//
// The inbox keeps its own migrations (not the relay's migrations/
// directory) because consumers live in their own databases, next to the
// state their handlers change.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	if schema == "" {
		schema = "public"
	}
	if err := validIdent(schema); err != nil {
		return fmt.Errorf("inbox schema: %w", err)
	}
	qs := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("inbox migrate: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('outbox-relay inbox migrate ' || $1, 0))`, schema); err != nil {
		return fmt.Errorf("inbox migrate: lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+qs); err != nil {
		return fmt.Errorf("inbox migrate: create schema %s: %w", schema, err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+qs+`.`+migrationsTable+` (
		version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("inbox migrate: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM `+qs+`.`+migrationsTable).Scan(&have); err != nil {
		return fmt.Errorf("inbox migrate: %w", err)
	}
	if have > len(migrationSteps) {
		return fmt.Errorf("inbox migrate: schema %s is at version %d, newer than this library (%d): upgrade the library", schema, have, len(migrationSteps))
	}
	for v := have + 1; v <= len(migrationSteps); v++ {
		if _, err := tx.Exec(ctx, strings.ReplaceAll(migrationSteps[v-1], "{schema}", qs)); err != nil {
			return fmt.Errorf("inbox migrate: step %d: %w", v, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+qs+`.`+migrationsTable+` (version) VALUES ($1)`, v); err != nil {
			return fmt.Errorf("inbox migrate: step %d: %w", v, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("inbox migrate: commit: %w", err)
	}
	return nil
}

// validIdent accepts unquoted lower-case identifiers (1-63 characters of
// letters, digits and underscores, not starting with a digit).
func validIdent(s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("%q: use 1-63 characters", s)
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r == '_':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return fmt.Errorf("%q: use lower-case letters, digits and underscores, not starting with a digit", s)
		}
	}
	return nil
}
