// Package jsonexpand rewrites a JSON payload the way Debezium's Outbox
// Event Router does with table.expand.json.payload=true and Kafka
// Connect's JsonConverter: the value of a FormatDebezium record with
// record.Config.DebeziumExpandJSON.
package jsonexpand

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
)

// This file reproduces what Debezium's Outbox Event Router writes with
// table.expand.json.payload=true and Kafka Connect's JsonConverter
// (schemas.enable=false) as the value converter: the router parses the
// payload text with Jackson, infers a Connect schema from it
// (JsonSchemaData: objects become structs, members holding null or an
// empty array are dropped, numbers become int32, int64 or float64) and
// the converter writes the struct back as compact JSON. Where the router
// cannot expand (the text is not an object, an array's elements differ in
// type, ...) the converter writes the payload text as a JSON string.
// docs/formats.md lists the cases where the router fails instead.

// jsonMaxNumberLen is Jackson's default StreamReadConstraints
// maxNumberLength: a longer number fails the parse.
const jsonMaxNumberLen = 1000

// jsonMaxDepth bounds nesting (Jackson's default maxNestingDepth).
const jsonMaxDepth = 1000

var errExpand = errors.New("payload cannot be expanded")

// Payload returns the record value for payload with expansion on: the
// expanded JSON, or the payload as a JSON string when Debezium would not
// (or could not) expand it.
func Payload(payload []byte) []byte {
	if out, err := expandJSON(payload); err == nil {
		return out
	}
	// Only read while appending: the string need not own its bytes.
	text := unsafe.String(unsafe.SliceData(payload), len(payload))
	return jsontext.AppendJacksonString(make([]byte, 0, len(payload)+len(payload)/8+2), text)
}

// expandJSON expands payload, a JSON object, the way the router and the
// JsonConverter do; an error means the converter writes the payload as a
// JSON string instead.
func expandJSON(payload []byte) ([]byte, error) {
	// The router expands only text starting with '{' or '[' (no
	// trimming); a top-level array never becomes a struct.
	if len(payload) == 0 || payload[0] != '{' {
		return nil, errExpand
	}
	p := parser{jsontext.NewScanner(payload)}
	root, err := p.value(0)
	if err != nil {
		return nil, err
	}
	sch, err := inferSchema(root)
	if err != nil || sch == nil {
		return nil, errExpand
	}
	return writeExpanded(make([]byte, 0, len(payload)), root, sch)
}

// jnode is a parsed JSON value. Objects keep their members in order, a
// repeated name replacing the earlier value in its first place (Jackson's
// ObjectNode).
type jnode struct {
	kind  byte // '{', '[', '"', '0' (number), 't', 'f', 'n'
	text  string
	names []string
	elems []*jnode
	// index maps names to positions once an object has many members.
	index map[string]int
}

// smallObject is the member count up to which lookups scan.
const smallObject = 16

// find returns the position of member name, or -1.
func (n *jnode) find(name string) int {
	if n.index != nil {
		if i, ok := n.index[name]; ok {
			return i
		}
		return -1
	}
	for i, k := range n.names {
		if k == name {
			return i
		}
	}
	return -1
}

// set adds member name, or replaces its value in its first place.
func (n *jnode) set(name string, v *jnode) {
	if i := n.find(name); i >= 0 {
		n.elems[i] = v
		return
	}
	n.names = append(n.names, name)
	n.elems = append(n.elems, v)
	switch {
	case n.index != nil:
		n.index[name] = len(n.names) - 1
	case len(n.names) > smallObject:
		n.index = make(map[string]int, 2*len(n.names))
		for i, k := range n.names {
			n.index[k] = i
		}
	}
}

func (n *jnode) member(name string) *jnode {
	if i := n.find(name); i >= 0 {
		return n.elems[i]
	}
	return nil
}

// parser reads one JSON value into jnodes; what follows it is ignored
// (Jackson's readTree without FAIL_ON_TRAILING_TOKENS). Any error is
// errExpand: the router would not expand the payload.
type parser struct {
	s *jsontext.Scanner
}

func (p parser) value(depth int) (*jnode, error) {
	if depth > jsonMaxDepth {
		return nil, errExpand
	}
	s := p.s
	s.SkipSpace()
	c, ok := s.Peek()
	if !ok {
		return nil, errExpand
	}
	switch {
	case c == '{':
		s.Consume('{')
		n := &jnode{kind: '{'}
		s.SkipSpace()
		if s.Consume('}') {
			return n, nil
		}
		for {
			s.SkipSpace()
			name, err := p.str()
			if err != nil {
				return nil, err
			}
			s.SkipSpace()
			if !s.Consume(':') {
				return nil, errExpand
			}
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.set(name, v)
			s.SkipSpace()
			if s.Consume(',') {
				continue
			}
			if s.Consume('}') {
				return n, nil
			}
			return nil, errExpand
		}
	case c == '[':
		s.Consume('[')
		n := &jnode{kind: '['}
		s.SkipSpace()
		if s.Consume(']') {
			return n, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
			s.SkipSpace()
			if s.Consume(',') {
				continue
			}
			if s.Consume(']') {
				return n, nil
			}
			return nil, errExpand
		}
	case c == '"':
		text, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jnode{kind: '"', text: text}, nil
	case c == '-' || c >= '0' && c <= '9':
		tok, ok := s.NumberToken()
		if !ok || len(tok) > jsonMaxNumberLen {
			return nil, errExpand
		}
		return &jnode{kind: '0', text: string(tok)}, nil
	case s.ConsumeLiteral("true"):
		return &jnode{kind: 't'}, nil
	case s.ConsumeLiteral("false"):
		return &jnode{kind: 'f'}, nil
	case s.ConsumeLiteral("null"):
		return &jnode{kind: 'n'}, nil
	}
	return nil, errExpand
}

// str reads a string token and returns its value, strictly: Jackson
// refuses what Unquote refuses (or the router then fails), and a lone
// surrogate, which Java would keep, is invalid in jsonb anyway.
func (p parser) str() (string, error) {
	tok, plain, err := p.s.StringToken()
	if err != nil {
		return "", errExpand
	}
	if plain {
		return string(tok[1 : len(tok)-1]), nil
	}
	v, ok := jsontext.Unquote(tok)
	if !ok {
		return "", errExpand
	}
	return v, nil
}

// jschema is the Connect schema JsonSchemaData infers for a JSON value.
type jschema struct {
	typ    byte // 's' string, 'b' boolean, 'i' int32, 'l' int64, 'd' float64, 'a' array, 'o' struct
	elem   *jschema
	fields []jfield
}

type jfield struct {
	name string
	sch  *jschema
}

// appendSig appends a rendering of s that is equal for two schemas
// exactly when Connect's schema equality holds for them (struct names
// derive from the same key here, so they never differ).
func (s *jschema) appendSig(b []byte) []byte {
	b = append(b, s.typ)
	switch s.typ {
	case 'a':
		b = s.elem.appendSig(b)
	case 'o':
		b = append(b, '{')
		for _, f := range s.fields {
			b = strconv.AppendQuote(b, f.name)
			b = f.sch.appendSig(b)
		}
		b = append(b, '}')
	}
	return b
}

// numberType is the schema type Jackson's node type maps to: int32 and
// int64 for integer tokens in range, float64 for fractions and exponents;
// 0 for a bigger integer (a BigIntegerNode, which the router types as
// float64 and then cannot convert).
func numberType(tok string) byte {
	if strings.ContainsAny(tok, ".eE") {
		return 'd'
	}
	v, err := strconv.ParseInt(tok, 10, 64)
	switch {
	case err != nil:
		return 0
	case v >= math.MinInt32 && v <= math.MaxInt32:
		return 'i'
	default:
		return 'l'
	}
}

var (
	schString  = &jschema{typ: 's'}
	schBoolean = &jschema{typ: 'b'}
	schInt32   = &jschema{typ: 'i'}
	schInt64   = &jschema{typ: 'l'}
	schFloat64 = &jschema{typ: 'd'}
)

// inferSchema is JsonSchemaData.toConnectSchema: nil for null and for an
// empty array (the member is then dropped), an error where the router
// throws (the payload then stays a string).
func inferSchema(n *jnode) (*jschema, error) {
	switch n.kind {
	case '"':
		return schString, nil
	case 't', 'f':
		return schBoolean, nil
	case '0':
		switch numberType(n.text) {
		case 'i':
			return schInt32, nil
		case 'l':
			return schInt64, nil
		default:
			return schFloat64, nil
		}
	case '[':
		if len(n.elems) == 0 {
			return nil, nil
		}
		elem, err := inferArrayElem(n)
		if err != nil {
			return nil, err
		}
		return &jschema{typ: 'a', elem: elem}, nil
	case '{':
		// The node's member names are unique already (set).
		s := &jschema{typ: 'o'}
		for i, name := range n.names {
			fs, err := inferSchema(n.elems[i])
			if err != nil {
				return nil, err
			}
			if fs != nil {
				s.fields = append(s.fields, jfield{name, fs})
			}
		}
		return s, nil
	}
	return nil, nil
}

// inferArrayElem is toConnectSchemaWithCycles: the element schema of a
// non-empty array. Elements must share one JSON type (nulls aside), and
// numbers one schema type. Object elements' schemas are merged: the
// fields of the first, then new fields of the others in order. (The
// router merges the distinct element schemas in the order of a Java
// HashSet, which differs from run to run when they differ in more than
// the fields they have; docs/formats.md.)
func inferArrayElem(n *jnode) (*jschema, error) {
	var ref *jnode
	var refNum byte
	for _, e := range n.elems {
		if e.kind == 'n' {
			continue
		}
		if ref == nil {
			ref = e
		}
		if jsonType(e.kind) != jsonType(ref.kind) {
			return nil, errExpand
		}
		if ref.kind == '0' {
			t := schemaNum(e.text)
			if refNum == 0 {
				refNum = schemaNum(ref.text)
			}
			if t != refNum {
				return nil, errExpand
			}
		}
	}
	if ref == nil {
		return nil, errExpand
	}
	if ref.kind != '{' {
		s, err := inferSchema(ref)
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, errExpand
		}
		return s, nil
	}
	var distinct []*jschema
	seen := map[string]bool{}
	for _, e := range n.elems {
		if e.kind != '{' {
			continue
		}
		s, err := inferSchema(e)
		if err != nil {
			return nil, err
		}
		if sig := string(s.appendSig(nil)); !seen[sig] {
			seen[sig] = true
			distinct = append(distinct, s)
		}
	}
	merged := &jschema{typ: 'o', fields: distinct[0].fields}
	if len(distinct) > 1 {
		merged.fields = append([]jfield(nil), merged.fields...)
		have := make(map[string]bool, len(merged.fields))
		for _, f := range merged.fields {
			have[f.name] = true
		}
		for _, s := range distinct[1:] {
			for _, f := range s.fields {
				if !have[f.name] {
					have[f.name] = true
					merged.fields = append(merged.fields, f)
				}
			}
		}
	}
	return merged, nil
}

// jsonType folds true and false into one JSON node type.
func jsonType(kind byte) byte {
	if kind == 'f' {
		return 't'
	}
	return kind
}

// schemaNum is the schema type of a number token (BigInteger folds into
// float64, as the router's toConnectSchema does).
func schemaNum(tok string) byte {
	if t := numberType(tok); t != 0 {
		return t
	}
	return 'd'
}

// writeExpanded appends n as the JsonConverter writes the Connect value
// the router builds from it with schema s; an error is a value the router
// cannot build (Connect's validation rejects it).
func writeExpanded(out []byte, n *jnode, s *jschema) ([]byte, error) {
	if n == nil || n.kind == 'n' {
		return append(out, "null"...), nil
	}
	switch s.typ {
	case 's':
		if n.kind != '"' {
			return nil, errExpand
		}
		return jsontext.AppendJacksonString(out, n.text), nil
	case 'b':
		switch n.kind {
		case 't':
			return append(out, "true"...), nil
		case 'f':
			return append(out, "false"...), nil
		}
		return nil, errExpand
	case 'i', 'l', 'd':
		if n.kind != '0' || numberType(n.text) != s.typ {
			return nil, errExpand
		}
		if s.typ != 'd' {
			v, _ := strconv.ParseInt(n.text, 10, 64)
			return strconv.AppendInt(out, v, 10), nil
		}
		f, _ := strconv.ParseFloat(n.text, 64)
		return appendJavaDouble(out, f), nil
	case 'a':
		if n.kind != '[' {
			return nil, errExpand
		}
		out = append(out, '[')
		for i, e := range n.elems {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = writeExpanded(out, e, s.elem); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case 'o':
		if n.kind != '{' {
			return nil, errExpand
		}
		out = append(out, '{')
		for i, f := range s.fields {
			if i > 0 {
				out = append(out, ',')
			}
			out = jsontext.AppendJacksonString(out, f.name)
			out = append(out, ':')
			var err error
			if out, err = writeExpanded(out, n.member(f.name), f.sch); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	}
	return nil, errExpand
}

// appendJavaDouble appends f as Java's Double.toString writes it (JDK 19
// and later, the shortest decimal that reads back as f): plain notation
// with at least one fraction digit for 1e-3 <= |f| < 1e7, else
// d.dddE[-]n; non-finite values as Jackson writes them, quoted.
func appendJavaDouble(out []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(out, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(out, `"-Infinity"`...)
	case math.IsNaN(f):
		return append(out, `"NaN"`...)
	case f == 0:
		if math.Signbit(f) {
			return append(out, "-0.0"...)
		}
		return append(out, "0.0"...)
	}
	if f < 0 {
		out = append(out, '-')
		f = -f
	}
	// Shortest digits and the decimal exponent: f = 0.d1d2... * 10^exp.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	mant, expPart, _ := strings.Cut(string(e), "e")
	digits := strings.Replace(mant, ".", "", 1)
	exp10, _ := strconv.Atoi(expPart) // f = d1.d2... * 10^exp10
	if f >= 1e-3 && f < 1e7 {
		if exp10 >= 0 {
			intLen := exp10 + 1
			for len(digits) < intLen {
				digits += "0"
			}
			out = append(out, digits[:intLen]...)
			out = append(out, '.')
			if frac := digits[intLen:]; frac != "" {
				return append(out, frac...)
			}
			return append(out, '0')
		}
		out = append(out, "0."...)
		for i := 0; i < -exp10-1; i++ {
			out = append(out, '0')
		}
		return append(out, digits...)
	}
	out = append(out, digits[0], '.')
	if len(digits) > 1 {
		out = append(out, digits[1:]...)
	} else {
		out = append(out, '0')
	}
	out = append(out, 'E')
	return strconv.AppendInt(out, int64(exp10), 10)
}
