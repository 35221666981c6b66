package replication

import (
	"fmt"
	"strings"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// Outbox column roles, found by name in each Relation message.
const (
	colEventID = iota
	colAggregateType
	colAggregateID
	colAggregateVersion
	colEventType
	colSchemaVersion
	colPayload
	colHeaders
	numRoles
)

var columnNames = [numRoles]string{
	migrations.ColEventID, migrations.ColAggregateType, migrations.ColAggregateID, migrations.ColAggregateVersion,
	migrations.ColEventType, migrations.ColSchemaVersion, migrations.ColPayload, migrations.ColHeaders,
}

// PostgreSQL's fixed type OIDs of the types package migrations accepts.
const (
	oidBytea       = 17
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidVarchar     = 1043
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

var typeOIDs = map[string]uint32{
	"bytea": oidBytea, "int8": oidInt8, "int2": oidInt2, "int4": oidInt4, "text": oidText, "json": oidJSON,
	"varchar": oidVarchar, "timestamp": oidTimestamp, "timestamptz": oidTimestamptz, "uuid": oidUUID, "jsonb": oidJSONB,
}

// acceptedTypes is, per role, the type OIDs the relay maps: the same set
// start-up validation (migrations.Columns) accepts, so a table that passes
// there decodes here.
var acceptedTypes = func() (out [numRoles][]uint32) {
	for _, c := range migrations.Columns() {
		for role, name := range columnNames {
			if c.Name == name {
				for _, t := range c.Types {
					out[role] = append(out[role], typeOIDs[t])
				}
			}
		}
	}
	return out
}()

func typeName(oid uint32) string {
	for name, o := range typeOIDs {
		if o == oid {
			return migrations.TypeDisplayName(name)
		}
	}
	return fmt.Sprintf("oid %d", oid)
}

// relation is the cached shape of one relation: where each role's column
// sits in the tuple. It is rebuilt from every Relation message, which the
// server sends once per connection and again after ALTER TABLE.
type relation struct {
	namespace, name string
	numColumns      int
	idx             [numRoles]int // tuple position per role, -1 if absent
	payloadBytea    bool
}

// RelationError is an outbox relation, as a Relation message of the stream
// describes it (sent again after every ALTER TABLE), that lacks a required
// column or has one of a type the relay cannot map. The relay stops on it,
// LSN held. The same check of the table before streaming, from the
// catalog, fails with a migrations.SchemaError.
type RelationError struct {
	Table    string
	Problems []string
}

func (e *RelationError) Error() string {
	return fmt.Sprintf("outbox table %s: %s", e.Table, strings.Join(e.Problems, "; "))
}

func newRelation(m relationMsg) (*relation, error) {
	rel := &relation{namespace: m.Namespace, name: m.Name, numColumns: len(m.Columns)}
	for i := range rel.idx {
		rel.idx[i] = -1
	}
	types := [numRoles]uint32{}
	for pos, c := range m.Columns {
		for role, name := range columnNames {
			if c.Name == name {
				rel.idx[role] = pos
				types[role] = c.TypeOID
			}
		}
	}
	var problems []string
	for role := range rel.idx {
		if rel.idx[role] < 0 {
			if role != colHeaders {
				problems = append(problems, fmt.Sprintf("missing column %q", columnNames[role]))
			}
			continue
		}
		ok := false
		for _, oid := range acceptedTypes[role] {
			ok = ok || oid == types[role]
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("column %q has type %s, not one the relay maps", columnNames[role], typeName(types[role])))
		}
	}
	if len(problems) > 0 {
		return nil, &RelationError{Table: m.Namespace + "." + m.Name, Problems: problems}
	}
	rel.payloadBytea = types[colPayload] == oidBytea
	return rel, nil
}
