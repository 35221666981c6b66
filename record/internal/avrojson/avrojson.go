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

	"github.com/twmb/avro"
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
// needs per node is worked out once (field defaults encoded, named types
// resolved), not per event.
type Schema struct {
	root *node
	avro *avro.Schema // for JSON
}

// Parse parses an Avro schema (its JSON text, as a registry returns it;
// github.com/twmb/avro checks it against the specification) and compiles
// it.
func Parse(text string) (*Schema, error) {
	s, err := avro.Parse(text)
	if err != nil {
		return nil, fmt.Errorf("avro schema: %w", err)
	}
	c := compiler{named: map[string]*node{}}
	root, err := c.compile(s.Root(), "")
	if err != nil {
		return nil, err
	}
	return &Schema{root: root, avro: s}, nil
}

// JSON decodes body, an Avro binary value of s, into JSON: unions bare,
// as a payload has them; bytes as strings of code points (github.com/twmb/avro's
// reading, checked against Apache Avro's). Text after the value is an
// error.
func (s *Schema) JSON(body []byte) ([]byte, error) {
	var v any
	rest, err := s.avro.Decode(body, &v)
	if err != nil {
		return nil, fmt.Errorf("avro value: %w", err)
	}
	if len(rest) > 0 {
		return nil, fmt.Errorf("avro value: %d bytes after the value", len(rest))
	}
	return s.avro.EncodeJSON(v)
}

// Append appends the Avro binary encoding of payload, a JSON value read
// against s, to dst. An error is an *Error.
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

// compile compiles n, in namespace ns (the enclosing named type's, for
// references by short name).
func (c *compiler) compile(n *avro.SchemaNode, ns string) (*node, error) {
	out := &node{name: n.Type}
	switch n.Type {
	case "null":
		out.kind = kNull
	case "boolean", "int", "long", "float", "double", "bytes", "string":
		out.kind = primitiveKinds[n.Type]
		out.logical, out.scale = logicals[n.LogicalType], n.Scale
		if out.logical == lDecimal && out.kind != kBytes {
			out.logical = lNone
		}
	case "record", "error", "enum", "fixed":
		out.name = fullName(n.Name, n.Namespace)
		if done := c.named[out.name]; done != nil {
			return done, nil
		}
		c.named[out.name] = out
		switch n.Type {
		case "enum":
			out.kind, out.symbols = kEnum, n.Symbols
		case "fixed":
			out.kind, out.size = kFixed, n.Size
			if logicals[n.LogicalType] == lDecimal {
				out.logical, out.scale = lDecimal, n.Scale
			}
		default:
			out.kind = kRecord
			ns := namespaceOf(out.name)
			for i := range n.Fields {
				f := &n.Fields[i]
				typ, err := c.compile(&f.Type, ns)
				if err != nil {
					return nil, err
				}
				fl := field{name: f.Name, typ: typ, hasDef: f.HasDefault}
				if fl.hasDef {
					if fl.defBytes, err = encodeDefault(typ, f.Default); err != nil {
						return nil, fmt.Errorf("avro schema: default of %s.%s: %w", out.name, f.Name, err)
					}
				}
				out.fields = append(out.fields, fl)
			}
		}
	case "array", "map":
		out.kind = kArray
		elem := n.Items
		if n.Type == "map" {
			out.kind, elem = kMap, n.Values
		}
		e, err := c.compile(elem, ns)
		if err != nil {
			return nil, err
		}
		out.elem = e
	case "union":
		out.kind = kUnion
		for i := range n.Branches {
			b, err := c.compile(&n.Branches[i], ns)
			if err != nil {
				return nil, err
			}
			out.branches = append(out.branches, b)
		}
	default: // a reference to a named type defined earlier
		if def := c.named[n.Type]; def != nil {
			return def, nil
		}
		if def := c.named[fullName(n.Type, ns)]; def != nil {
			return def, nil
		}
		return nil, fmt.Errorf("avro schema: type %q is not defined before its use", n.Type)
	}
	return out, nil
}

func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func namespaceOf(full string) string {
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		return full[:i]
	}
	return ""
}

var primitiveKinds = map[string]kind{
	"boolean": kBoolean, "int": kInt, "long": kLong, "float": kFloat, "double": kDouble, "bytes": kBytes, "string": kString,
}

var logicals = map[string]logical{
	"date": lDate, "time-millis": lTimeMillis, "time-micros": lTimeMicros,
	"timestamp-millis": lTimestampMillis, "timestamp-micros": lTimestampMicros,
	"local-timestamp-millis": lLocalTimestampMillis, "local-timestamp-micros": lLocalTimestampMicros,
	"decimal": lDecimal, "uuid": lUUID,
}

// encodeDefault encodes a field's default, a Go value of its type (see
// avro.SchemaField.Default), back through its JSON form.
func encodeDefault(typ *node, def any) ([]byte, error) {
	// bytes and fixed defaults are []byte: back to the specification's
	// string of code points.
	if v := reflect.ValueOf(def); def != nil && (v.Kind() == reflect.Slice || v.Kind() == reflect.Array) && v.Type().Elem().Kind() == reflect.Uint8 {
		b := make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(b), v)
		def = bytesAsCodePoints(b)
	}
	text, err := json.Marshal(def)
	if err != nil {
		return nil, err
	}
	// A union's default is its first branch's, by the specification;
	// github.com/twmb/avro accepts the first branch that takes it, and so
	// does a bare union value here.
	e := encoder{}
	if err := e.value(typ, newScanner(text)); err != nil {
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

// IsString reports whether s is the primitive "string" (a logical type
// on it, such as uuid, included): the schema of a key that is a string.
func (s *Schema) IsString() bool { return s.root.kind == kString }
