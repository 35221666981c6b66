package migrations

import (
	"context"
	"fmt"
	"strings"
)

// Schema is what Validate learned about an outbox table that the relay and
// producers need to adapt to: how the payload is stored and which optional
// columns exist.
type Schema struct {
	// PayloadType is the pg_type.typname of the payload column: "jsonb",
	// "json", "bytea" or "text".
	PayloadType string
	// HasHeaders reports whether the optional headers column exists.
	HasHeaders bool
	// HasCreatedAt reports whether the optional created_at column exists.
	HasCreatedAt bool
}

// SchemaError reports every problem found with an outbox table at once, so
// that fixing a hand-made table takes one round trip rather than one per
// column.
type SchemaError struct {
	Table Table
	// TableMissing is true when the table does not exist at all; Problems
	// then holds just that one message.
	TableMissing bool
	// Problems are human-readable descriptions, one per column problem,
	// e.g. `missing column "aggregate_id"` or
	// `column "aggregate_version" has type text, want bigint`.
	Problems []string
}

// Error names every problem; the wording is part of the relay's contract
// (tests and operators match on it).
func (e *SchemaError) Error() string {
	if e.TableMissing {
		return fmt.Sprintf("table %s does not exist (run \"outbox-relay migrate\")", e.Table)
	}
	return fmt.Sprintf("outbox table %s is not usable: %s", e.Table, strings.Join(e.Problems, "; "))
}

// tableColumnsSQL lists the live columns of one relation, looked up by
// catalog name rather than regclass so that a missing schema reads as a
// missing table instead of an error. The LEFT JOIN keeps one row for a
// relation without columns.
const tableColumnsSQL = `
SELECT c.relkind::text, a.attname::text, t.typname::text
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE n.nspname = $1 AND c.relname = $2
ORDER BY a.attnum`

// Validate checks that t exists and has every required column with an
// accepted type (see Columns), and reports how the optional parts are
// stored. Extra columns are allowed: applications often add their own
// (tenant, correlation id) and the relay ignores them.
//
// Nullability is not checked: a hand-made table may lack NOT NULL, and the
// decoder has to cope with NULLs in any case.
//
// On failure the error is a *SchemaError.
func Validate(ctx context.Context, db Querier, t Table) (Schema, error) {
	rows, err := db.Query(ctx, tableColumnsSQL, t.Schema, t.Name)
	if err != nil {
		return Schema{}, fmt.Errorf("validate outbox table %s: %w", t, err)
	}
	defer rows.Close()

	var (
		relkind string
		found   bool
		types   = map[string]string{}
	)
	for rows.Next() {
		var name, typname *string
		if err := rows.Scan(&relkind, &name, &typname); err != nil {
			return Schema{}, fmt.Errorf("validate outbox table %s: %w", t, err)
		}
		found = true
		if name != nil && typname != nil {
			types[*name] = *typname
		}
	}
	if err := rows.Err(); err != nil {
		return Schema{}, fmt.Errorf("validate outbox table %s: %w", t, err)
	}
	if !found {
		return Schema{}, &SchemaError{Table: t, TableMissing: true,
			Problems: []string{fmt.Sprintf("table %s does not exist", t)}}
	}
	if relkind != "r" && relkind != "p" {
		return Schema{}, &SchemaError{Table: t,
			Problems: []string{fmt.Sprintf("%s is a %s, not a table", t, relkindName(relkind))}}
	}
	return checkColumns(t, types)
}

// checkColumns compares a column-name → typname map against Columns. It is
// separate from Validate so the rules can be unit-tested without a server.
func checkColumns(t Table, types map[string]string) (Schema, error) {
	var (
		s        Schema
		problems []string
	)
	for _, c := range Columns() {
		typ, ok := types[c.Name]
		if !ok {
			if c.Required {
				problems = append(problems, fmt.Sprintf("missing column %q", c.Name))
			}
			continue
		}
		if !c.Accepts(typ) {
			problems = append(problems, fmt.Sprintf("column %q has type %s, want %s", c.Name, TypeDisplayName(typ), c.Want()))
			continue
		}
		switch c.Name {
		case ColPayload:
			s.PayloadType = typ
		case ColHeaders:
			s.HasHeaders = true
		case ColCreatedAt:
			s.HasCreatedAt = true
		}
	}
	if len(problems) > 0 {
		return Schema{}, &SchemaError{Table: t, Problems: problems}
	}
	return s, nil
}

// relkindName spells out pg_class.relkind for the "is a view, not a table"
// message.
func relkindName(k string) string {
	switch k {
	case "v":
		return "view"
	case "m":
		return "materialized view"
	case "f":
		return "foreign table"
	case "i", "I":
		return "index"
	case "S":
		return "sequence"
	case "c":
		return "composite type"
	case "t":
		return "TOAST table"
	default:
		return fmt.Sprintf("relation of kind %q", k)
	}
}
