// Package avrojson encodes an outbox row's JSON payload into the Avro
// binary encoding of a schema (issue 48: the avro record format).
//
// The payload is what an application wrote as JSON, so the mapping
// accepts both the Avro specification's JSON encoding and the JSON people
// write for the same data:
//
//   - a union value is either wrapped, {"string": "x"} (the
//     specification's form, and what Avro's own tools print), or bare, "x",
//     when its JSON kind selects one branch: null for "null", a string for
//     the first string-like branch, a number for the first numeric one, and
//     so on;
//   - date, time and timestamp logical types take their underlying number
//     or an RFC 3339 string ("2026-12-07", "12:30:00.5",
//     "2026-12-07T12:30:00Z"); decimal takes a JSON number or a string of
//     one ("12.30"), never rounded: more fraction digits than the scale is
//     an error;
//   - bytes and fixed take the specification's string of code points 0 to
//     255.
//
// A field missing from the payload takes the schema's default; one with
// no default is an error, and so is a payload member the schema does not
// have: a payload that does not match its schema version is a poison
// event to dead-letter, never one to send with data dropped.
//
// Encoding walks the JSON text with internal/jsontext and the schema
// compiled once (Compile): no reflection, no intermediate values, and no
// allocation beyond the output and, for records, the member list.
package avrojson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/hamba/avro/v2"
)

// Error is a payload that does not fit its schema: Path names the
// offending field the way a person finds it in the payload
// ("items[2].price"; "" for the whole value), Reason says what is wrong.
type Error struct {
	Path   string
	Reason string
}

func (e *Error) Error() string {
	if e.Path == "" {
		return e.Reason
	}
	return "field " + e.Path + ": " + e.Reason
}

// Schema is a parsed Avro schema, compiled for encoding: what the encoder
// needs per node is worked out once (field defaults encoded, union
// branches by name), not per event.
type Schema struct {
	root *node
}

// Parse parses an Avro schema (its JSON text, as a registry returns it)
// and compiles it. Named types resolve within this schema alone: hamba's
// package-wide cache would grow with every schema a long-running relay
// ever fetched.
func Parse(text string) (*Schema, error) {
	s, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("avro schema: %w", err)
	}
	return Compile(s)
}

// Compile compiles a parsed schema.
func Compile(s avro.Schema) (*Schema, error) {
	c := compiler{named: map[string]*node{}}
	root, err := c.compile(s)
	if err != nil {
		return nil, err
	}
	return &Schema{root: root}, nil
}

// Append appends the Avro binary encoding of payload, a JSON value read
// against s, to dst. An error is an *Error, or a JSON syntax error.
func (s *Schema) Append(dst []byte, payload []byte) ([]byte, error) {
	e := encoders.Get().(*encoder)
	defer func() {
		e.dst, e.path, e.members = nil, e.path[:0], e.members[:0]
		encoders.Put(e)
	}()
	e.dst = dst
	sc := newScanner(payload)
	sc.SkipSpace()
	if err := e.value(s.root, sc); err != nil {
		return dst, err
	}
	sc.SkipSpace()
	if !sc.AtEnd() {
		return dst, &Error{Reason: "text after the JSON value"}
	}
	return e.dst, nil
}

// kind is a node's Avro type with its logical type folded in.
type kind uint8

const (
	kNull kind = iota
	kBoolean
	kInt
	kLong
	kFloat
	kDouble
	kBytes
	kString
	kRecord
	kEnum
	kArray
	kMap
	kUnion
	kFixed
)

// logical is the logical type a node's text form accepts.
type logical uint8

const (
	lNone logical = iota
	lDate
	lTimeMillis
	lTimeMicros
	lTimestampMillis
	lTimestampMicros
	lLocalTimestampMillis
	lLocalTimestampMicros
	lDecimal
	lUUID
)

// node is a compiled schema node.
type node struct {
	kind    kind
	logical logical
	name    string // a named type's full name; a primitive's type name
	// record
	fields []field
	// enum
	symbols []string
	// array items, map values
	elem *node
	// union branches
	branches []*node
	// fixed size, decimal scale
	size, scale int
}

// field is a record field: its name, type and, when it has one, its
// default's encoding.
type field struct {
	name     string
	typ      *node
	hasDef   bool
	defBytes []byte
}

type compiler struct {
	named map[string]*node
}

func (c *compiler) compile(s avro.Schema) (*node, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		if done := c.named[n.FullName()]; done != nil {
			return done, nil // a recursive or repeated named type
		}
	}
	n := &node{name: string(s.Type())}
	switch s := s.(type) {
	case *avro.NullSchema:
		n.kind = kNull
	case *avro.PrimitiveSchema:
		n.kind = primitiveKinds[s.Type()]
		if l := s.Logical(); l != nil {
			n.logical = logicals[l.Type()]
			if d, ok := l.(*avro.DecimalLogicalSchema); ok {
				n.scale = d.Scale()
			}
		}
	case *avro.RecordSchema:
		n.kind, n.name = kRecord, s.FullName()
		c.named[n.name] = n
		for _, f := range s.Fields() {
			typ, err := c.compile(f.Type())
			if err != nil {
				return nil, err
			}
			fl := field{name: f.Name(), typ: typ, hasDef: f.HasDefault()}
			if fl.hasDef {
				if fl.defBytes, err = encodeDefault(typ, f.Default()); err != nil {
					return nil, fmt.Errorf("avro schema: default of %s.%s: %w", n.name, f.Name(), err)
				}
			}
			n.fields = append(n.fields, fl)
		}
	case *avro.EnumSchema:
		n.kind, n.name, n.symbols = kEnum, s.FullName(), s.Symbols()
		c.named[n.name] = n
	case *avro.FixedSchema:
		n.kind, n.name, n.size = kFixed, s.FullName(), s.Size()
		c.named[n.name] = n
		if l := s.Logical(); l != nil {
			n.logical = logicals[l.Type()]
			if d, ok := l.(*avro.DecimalLogicalSchema); ok {
				n.scale = d.Scale()
			}
		}
	case *avro.ArraySchema:
		n.kind = kArray
		elem, err := c.compile(s.Items())
		if err != nil {
			return nil, err
		}
		n.elem = elem
	case *avro.MapSchema:
		n.kind = kMap
		elem, err := c.compile(s.Values())
		if err != nil {
			return nil, err
		}
		n.elem = elem
	case *avro.UnionSchema:
		n.kind = kUnion
		for _, b := range s.Types() {
			bn, err := c.compile(b)
			if err != nil {
				return nil, err
			}
			n.branches = append(n.branches, bn)
		}
	default:
		return nil, fmt.Errorf("avro schema: type %s is not supported", s.Type())
	}
	return n, nil
}

var primitiveKinds = map[avro.Type]kind{
	avro.Null: kNull, avro.Boolean: kBoolean, avro.Int: kInt, avro.Long: kLong,
	avro.Float: kFloat, avro.Double: kDouble, avro.Bytes: kBytes, avro.String: kString,
}

var logicals = map[avro.LogicalType]logical{
	avro.Date: lDate, avro.TimeMillis: lTimeMillis, avro.TimeMicros: lTimeMicros,
	avro.TimestampMillis: lTimestampMillis, avro.TimestampMicros: lTimestampMicros,
	avro.LocalTimestampMillis: lLocalTimestampMillis, avro.LocalTimestampMicros: lLocalTimestampMicros,
	avro.Decimal: lDecimal, avro.UUID: lUUID,
}

// encodeDefault encodes a field's default, which the specification gives
// as JSON of the field's type (of a union's first branch).
func encodeDefault(typ *node, def any) ([]byte, error) {
	// hamba holds bytes defaults as []byte and fixed ones as [N]byte:
	// back to the specification's string of code points.
	if v := reflect.ValueOf(def); def != nil && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(b), v)
		def = bytesAsCodePoints(b)
	}
	text, err := json.Marshal(def)
	if err != nil {
		return nil, err
	}
	e := encoder{}
	t := typ
	if typ.kind == kUnion {
		e.dst = appendLong(e.dst, 0)
		t = typ.branches[0]
	}
	sc := newScanner(text)
	if err := e.value(t, sc); err != nil {
		return nil, err
	}
	return e.dst, nil
}

func bytesAsCodePoints(b []byte) string {
	var sb strings.Builder
	for _, c := range b {
		sb.WriteRune(rune(c))
	}
	return sb.String()
}
