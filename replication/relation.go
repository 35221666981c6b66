package replication

import (
	"fmt"
	"strings"
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
	"event_id", "aggregate_type", "aggregate_id", "aggregate_version",
	"event_type", "schema_version", "payload", "headers",
}

// PostgreSQL type OIDs the decoder accepts per role.
const (
	oidBytea   = 17
	oidInt8    = 20
	oidInt4    = 23
	oidInt2    = 21
	oidText    = 25
	oidJSON    = 114
	oidVarchar = 1043
	oidUUID    = 2950
	oidJSONB   = 3802
)

var acceptedTypes = [numRoles][]uint32{
	colEventID:          {oidUUID, oidText, oidVarchar},
	colAggregateType:    {oidText, oidVarchar},
	colAggregateID:      {oidText, oidVarchar},
	colAggregateVersion: {oidInt8, oidInt4},
	colEventType:        {oidText, oidVarchar},
	colSchemaVersion:    {oidInt4, oidInt2, oidInt8},
	colPayload:          {oidJSONB, oidJSON, oidBytea, oidText},
	colHeaders:          {oidJSONB, oidJSON},
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

// SchemaError is an outbox relation that lacks a required column or has
// one of a type the relay cannot map. The relay stops on it, LSN held.
type SchemaError struct {
	Table    string
	Problems []string
}

func (e *SchemaError) Error() string {
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
			problems = append(problems, fmt.Sprintf("column %q has type oid %d, not one the relay maps", columnNames[role], types[role]))
		}
	}
	if len(problems) > 0 {
		return nil, &SchemaError{Table: m.Namespace + "." + m.Name, Problems: problems}
	}
	rel.payloadBytea = types[colPayload] == oidBytea
	return rel, nil
}
