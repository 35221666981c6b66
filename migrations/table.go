package migrations

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DefaultSchema is the schema a table name without a schema qualifier
// resolves to. It is fixed rather than taken from search_path so that the
// relay, the migrator and producers always agree on which table they mean,
// whatever role or connection settings each of them uses.
const DefaultSchema = "public"

// maxIdentifierLen is PostgreSQL's NAMEDATALEN-1: longer identifiers are
// silently truncated by the server, which would make two distinct
// configured names refer to the same table.
const maxIdentifierLen = 63

// Table names the outbox table. It is kept as two unquoted parts so it can
// be quoted for SQL text (Quoted), compared with catalog values (Schema and
// Name match pg_namespace.nspname and pg_class.relname) and shown to humans
// (String).
type Table struct {
	Schema string
	Name   string
}

// ParseTable parses a configured table name of the form "name" or
// "schema.name". A missing schema means DefaultSchema.
//
// Each part must be an unquoted PostgreSQL identifier: 1 to 63 characters
// of ASCII letters, digits and underscores, not starting with a digit.
// Letters are folded to lower case, exactly as PostgreSQL folds unquoted
// identifiers, so "Outbox" names the table that "CREATE TABLE Outbox"
// created. Quoted identifiers are not accepted: they are rarely needed for
// an outbox table and accepting them would make "a.b" ambiguous.
func ParseTable(s string) (Table, error) {
	if strings.TrimSpace(s) == "" {
		return Table{}, fmt.Errorf("invalid table name %q: %s", s, acceptedTableForms)
	}
	parts := strings.Split(s, ".")
	if len(parts) > 2 {
		return Table{}, fmt.Errorf("invalid table name %q: too many dots; %s", s, acceptedTableForms)
	}
	for i, p := range parts {
		folded, err := parseIdentifier(p)
		if err != nil {
			return Table{}, fmt.Errorf("invalid table name %q: %w; %s", s, err, acceptedTableForms)
		}
		parts[i] = folded
	}
	if len(parts) == 1 {
		return Table{Schema: DefaultSchema, Name: parts[0]}, nil
	}
	return Table{Schema: parts[0], Name: parts[1]}, nil
}

const acceptedTableForms = `want "name" or "schema.name", each part 1-63 characters of letters, digits and underscores, not starting with a digit`

// parseIdentifier validates one unquoted identifier and returns it folded
// to lower case.
func parseIdentifier(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("empty name part")
	}
	if len(p) > maxIdentifierLen {
		return "", fmt.Errorf("name part %q is longer than %d characters", p, maxIdentifierLen)
	}
	for i, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case r >= '0' && r <= '9':
			if i == 0 {
				return "", fmt.Errorf("name part %q starts with a digit", p)
			}
		default:
			return "", fmt.Errorf("name part %q contains invalid character %q", p, r)
		}
	}
	return strings.ToLower(p), nil
}

// Quoted returns the schema-qualified, quoted identifier for use in SQL
// text. Quoting always (rather than only when needed) keeps the generated
// SQL independent of search_path and reserved words such as "order".
func (t Table) Quoted() string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// String returns "schema.name" without quotes, for logs and error messages.
func (t Table) String() string {
	return t.Schema + "." + t.Name
}

// sibling returns a table in the same schema as t. The migration
// bookkeeping table lives next to the outbox table.
func (t Table) sibling(name string) Table {
	return Table{Schema: t.Schema, Name: name}
}

// DeadLetterTableName is the relay's dead-letter table, created by
// migration 2 in the outbox table's schema and shared by every outbox
// table there (rows carry the outbox table's name).
const DeadLetterTableName = "outbox_dead_letter"

// DeadLetterTable returns the dead-letter table that serves outbox table t.
func DeadLetterTable(t Table) Table {
	return t.sibling(DeadLetterTableName)
}

// CheckpointTableName is the relay's checkpoint table, created by
// migration 3 in the outbox table's schema and shared by every outbox
// table there (rows carry the outbox table's name and the slot).
const CheckpointTableName = "outbox_relay_checkpoint"

// CheckpointTable returns the checkpoint table that serves outbox table t.
func CheckpointTable(t Table) Table {
	return t.sibling(CheckpointTableName)
}
