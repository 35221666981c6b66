package replication

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// pgoutput protocol version 1 message types (PostgreSQL docs, "Logical
// Replication Message Formats").
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

// Tuple column kinds.
const (
	colNull      = 'n'
	colUnchanged = 'u'
	colText      = 't'
	colBinary    = 'b'
)

// errShort is returned for any message that ends before its fields do; the
// decoder never reads past its input, whatever the bytes say.
var errShort = errors.New("pgoutput: message truncated")

// pgEpoch is PostgreSQL's timestamp origin.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// reader walks one pgoutput message with bounds checks. The first error
// sticks, so callers check once at the end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errShort
	}
	r.b = nil
}

func (r *reader) u8() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u16() uint16 {
	if len(r.b) < 2 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint16(r.b)
	r.b = r.b[2:]
	return v
}

func (r *reader) u32() uint32 {
	if len(r.b) < 4 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint32(r.b)
	r.b = r.b[4:]
	return v
}

func (r *reader) u64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) lsn() pglogrepl.LSN { return pglogrepl.LSN(r.u64()) }

func (r *reader) time() time.Time {
	us := int64(r.u64())
	return pgEpoch.Add(time.Duration(us) * time.Microsecond)
}

// cstring returns a NUL-terminated string, aliasing the input.
func (r *reader) cstring() []byte {
	for i, c := range r.b {
		if c == 0 {
			s := r.b[:i]
			r.b = r.b[i+1:]
			return s
		}
	}
	r.fail()
	return nil
}

func (r *reader) bytes(n int) []byte {
	if n < 0 || len(r.b) < n {
		r.fail()
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func parseBegin(b []byte) (Begin, error) {
	r := reader{b: b}
	m := Begin{FinalLSN: r.lsn(), CommitTime: r.time(), Xid: r.u32()}
	return m, r.err
}

func parseCommit(b []byte) (Commit, error) {
	r := reader{b: b}
	r.u8() // flags, unused
	m := Commit{CommitLSN: r.lsn(), EndLSN: r.lsn(), CommitTime: r.time()}
	return m, r.err
}

// relationColumn is one column of a Relation message.
type relationColumn struct {
	Name    string
	TypeOID uint32
}

// relationMsg is pgoutput's Relation.
type relationMsg struct {
	ID        uint32
	Namespace string
	Name      string
	Columns   []relationColumn
}

// maxColumns is PostgreSQL's own limit (MaxTupleAttributeNumber is lower);
// anything above it is corrupt input, refused before allocating.
const maxColumns = 1664

func parseRelation(b []byte) (relationMsg, error) {
	r := reader{b: b}
	m := relationMsg{ID: r.u32(), Namespace: string(r.cstring()), Name: string(r.cstring())}
	r.u8() // replica identity
	n := int(r.u16())
	if r.err != nil {
		return m, r.err
	}
	if n > maxColumns || n*7 > len(r.b) { // each column takes at least 7 bytes
		return m, fmt.Errorf("pgoutput: relation %d claims %d columns in %d bytes", m.ID, n, len(r.b))
	}
	m.Columns = make([]relationColumn, n)
	for i := range m.Columns {
		r.u8() // flags
		m.Columns[i].Name = string(r.cstring())
		m.Columns[i].TypeOID = r.u32()
		r.u32() // type modifier
	}
	return m, r.err
}

// tupleColumn is one value of a TupleData, aliasing the message buffer.
type tupleColumn struct {
	Kind byte
	Data []byte
}

// parseTuple decodes a TupleData into cols (reused to avoid per-row
// allocation) and returns the rest of the input.
func parseTuple(r *reader, cols []tupleColumn) ([]tupleColumn, error) {
	n := int(r.u16())
	if r.err != nil {
		return cols[:0], r.err
	}
	if n > maxColumns || n > len(r.b) { // each column takes at least 1 byte
		return cols[:0], fmt.Errorf("pgoutput: tuple claims %d columns in %d bytes", n, len(r.b))
	}
	cols = cols[:0]
	for i := 0; i < n; i++ {
		c := tupleColumn{Kind: r.u8()}
		switch c.Kind {
		case colText, colBinary:
			c.Data = r.bytes(int(r.u32()))
		case colNull, colUnchanged:
		default:
			if r.err == nil {
				return cols, fmt.Errorf("pgoutput: unknown tuple column kind %q", c.Kind)
			}
		}
		if r.err != nil {
			return cols, r.err
		}
		cols = append(cols, c)
	}
	return cols, nil
}

// insertMsg is pgoutput's Insert; Columns alias the message buffer.
type insertMsg struct {
	RelationID uint32
	Columns    []tupleColumn
}

func parseInsert(b []byte, cols []tupleColumn) (insertMsg, error) {
	r := reader{b: b}
	m := insertMsg{RelationID: r.u32()}
	if k := r.u8(); r.err == nil && k != 'N' {
		return m, fmt.Errorf("pgoutput: insert tuple marker %q, want 'N'", k)
	}
	var err error
	m.Columns, err = parseTuple(&r, cols)
	return m, err
}

// logicalMsg is pgoutput's Message (pg_logical_emit_message).
type logicalMsg struct {
	Transactional bool
	LSN           pglogrepl.LSN
	Prefix        string
}

func parseLogicalMessage(b []byte) (logicalMsg, error) {
	r := reader{b: b}
	m := logicalMsg{Transactional: r.u8() == 1, LSN: r.lsn(), Prefix: string(r.cstring())}
	r.bytes(int(r.u32()))
	return m, r.err
}
