package migrations

import (
	"slices"
	"strings"
)

// Column describes one outbox column the relay understands: its name,
// whether the relay refuses to run without it, and the PostgreSQL types
// (pg_type.typname, e.g. "int8" rather than "bigint") it accepts for it.
// The replication decoder uses the same list to interpret the columns of a
// relation message, so validation and decoding cannot disagree.
type Column struct {
	Name     string
	Required bool
	// Types are accepted pg_type.typname values. The first one is the type
	// migration 1 creates (for payload it depends on ApplyOptions).
	Types []string
}

// Accepts reports whether typname (a pg_type.typname) is valid for c.
func (c Column) Accepts(typname string) bool {
	return slices.Contains(c.Types, typname)
}

// Want renders the accepted types for an error message, e.g.
// "integer or bigint".
func (c Column) Want() string {
	names := make([]string, len(c.Types))
	for i, t := range c.Types {
		names[i] = TypeDisplayName(t)
	}
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	default:
		return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	}
}

// Column names, exported so producers, the decoder and tests do not repeat
// string literals.
const (
	ColEventID          = "event_id"
	ColAggregateType    = "aggregate_type"
	ColAggregateID      = "aggregate_id"
	ColAggregateVersion = "aggregate_version"
	ColEventType        = "event_type"
	ColSchemaVersion    = "schema_version"
	ColPayload          = "payload"
	ColHeaders          = "headers"
	ColCreatedAt        = "created_at"
)

// Columns returns every column the relay knows about, required and
// optional, in table order. It returns a fresh slice on every call so that
// no caller can change what another caller validates against.
func Columns() []Column {
	return []Column{
		{Name: ColEventID, Required: true, Types: []string{"uuid"}},
		{Name: ColAggregateType, Required: true, Types: []string{"text", "varchar"}},
		{Name: ColAggregateID, Required: true, Types: []string{"text", "varchar"}},
		{Name: ColAggregateVersion, Required: true, Types: []string{"int8"}},
		{Name: ColEventType, Required: true, Types: []string{"text", "varchar"}},
		{Name: ColSchemaVersion, Required: true, Types: []string{"int4", "int8"}},
		{Name: ColPayload, Required: true, Types: []string{"jsonb", "json", "bytea", "text"}},
		{Name: ColHeaders, Required: false, Types: []string{"jsonb", "json"}},
		{Name: ColCreatedAt, Required: false, Types: []string{"timestamptz", "timestamp"}},
	}
}

// RequiredColumns returns the columns without which the relay cannot build
// a Kafka record. Like Columns it returns a fresh slice.
func RequiredColumns() []Column {
	all := Columns()
	out := all[:0]
	for _, c := range all {
		if c.Required {
			out = append(out, c)
		}
	}
	return out
}

// TypeDisplayName returns the DDL spelling of a pg_type.typname ("int8" →
// "bigint"), so messages use the names people write in CREATE TABLE.
// Array types ("_text") are shown as "text[]"; unknown names are returned
// unchanged.
func TypeDisplayName(typname string) string {
	if elem, ok := strings.CutPrefix(typname, "_"); ok && elem != "" {
		return TypeDisplayName(elem) + "[]"
	}
	switch typname {
	case "int2":
		return "smallint"
	case "int4":
		return "integer"
	case "int8":
		return "bigint"
	case "float4":
		return "real"
	case "float8":
		return "double precision"
	case "bool":
		return "boolean"
	case "bpchar":
		return "char"
	default:
		return typname
	}
}
