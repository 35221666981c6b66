package pbjson

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The direct encoder: a payload's JSON read token by token against a
// plan and written as the Protobuf binary proto.MarshalOptions{
// Deterministic: true} writes for the message protojson.Unmarshal would
// build from it, byte for byte, without building that message (the
// dynamicpb path costs ~50 allocations an event). It accepts exactly what
// protojson accepts (FuzzDirect holds the two paths to that): the JSON
// grammar and the number and string rules of protojson's own decoder
// (google.golang.org/protobuf/internal/encoding/json), including its
// quirks (an exponent without digits, "1e", is an integer 1 for an
// integer field), field names as json_name or as declared, null as an
// absent field, duplicate names, a second member of a oneof and unknown
// names refused.
//
// Output order: a message's fields come in the order proto.Marshal sorts
// them (plan.order), whatever the JSON order; a map's entries in key
// order. Each field is encoded where it stands in the input, and the
// body is rearranged afterwards only when it is out of order.

// maxDepth is protojson's default recursion limit on nested messages.
const maxDepth = protowire.DefaultRecursionLimit

// seg is one field's encoding in a message body being built.
type seg struct {
	order      uint32
	start, end int
}

// entry is one map entry's encoding: its key for the order (bool as 0
// or 1, a signed integer with its sign bit flipped, an unsigned as it
// is), or for a string key where the key's bytes lie in dst.
type entry struct {
	key          uint64
	start, end   int
	kstart, kend int
}

// step is one step of the path to the value being encoded, for errors:
// a field, the element index in a list (-1 for none), the raw key token
// in a map (keyStart < 0 for none).
type step struct {
	f              *planField
	index          int
	keyStart, keyE int
}

// encoder holds one Append's state. Its stacks (segs, ents, seen, path)
// are shared by the nested values and recycled across events (encoders),
// so an event allocates nothing once they have grown.
type encoder struct {
	src   []byte
	i     int
	dst   []byte
	name  string // the top message, for errors
	depth int

	segs []seg
	ents []entry
	seen []uint64
	path []step
	buf  []byte // a body or map being rearranged
	tmp  []byte // an escaped string's value (a name, a number, base64)
}

var encoders = sync.Pool{New: func() any { return new(encoder) }}

// maxPooled bounds the scratch buffers a pooled encoder keeps.
const maxPooled = 64 << 10

// appendDirect is Append's direct path.
func appendDirect(pl *plan, name string, dst, payload []byte) ([]byte, error) {
	e := encoders.Get().(*encoder)
	e.src, e.i, e.dst, e.name, e.depth = payload, 0, dst, name, 0
	err := e.message(pl)
	if err == nil {
		e.space()
		if e.i < len(e.src) {
			err = e.unexpected()
		}
	}
	out := e.dst
	e.src, e.dst = nil, nil
	e.segs, e.ents, e.seen, e.path = e.segs[:0], e.ents[:0], e.seen[:0], e.path[:0]
	clear(e.path[:cap(e.path)]) // no plan kept alive by a pooled encoder
	if cap(e.buf) > maxPooled {
		e.buf = nil // a rare huge payload's buffers are not kept for every event after it
	}
	if cap(e.tmp) > maxPooled {
		e.tmp = nil
	}
	encoders.Put(e)
	if err != nil {
		return dst, err
	}
	return out, nil
}

// message encodes the object that comes next as a message of pl.
func (e *encoder) message(pl *plan) error {
	if e.depth++; e.depth > maxDepth {
		return e.fail(e.i, "exceeded max recursion depth")
	}
	e.space()
	if !e.consume('{') {
		return e.unexpected()
	}
	body, segBase, seenBase := len(e.dst), len(e.segs), len(e.seen)
	for range pl.words {
		e.seen = append(e.seen, 0)
	}
	e.space()
	if !e.consume('}') {
		for {
			e.space()
			nameStart := e.i
			name, ok := e.content()
			if !ok {
				return e.unexpectedAt(nameStart)
			}
			nameEnd := e.i
			e.space()
			if !e.consume(':') {
				return e.unexpected()
			}
			idx, known := pl.byName[string(name)]
			if !known {
				return e.failAt(nameStart, string(name), "unknown field %s", e.src[nameStart:nameEnd])
			}
			f := &pl.fields[idx]
			if !e.see(seenBase, idx) {
				return e.failAt(nameStart, f.name, "duplicate field %s", e.src[nameStart:nameEnd])
			}
			e.space()
			if !e.literal("null") {
				if f.oneof >= 0 && !e.see(seenBase, f.oneof) {
					return e.failAt(nameStart, f.name, "error parsing %s, oneof is already set", e.src[nameStart:nameEnd])
				}
				e.path = append(e.path, step{f: f, index: -1, keyStart: -1})
				start := len(e.dst)
				if err := e.field(f); err != nil {
					return err
				}
				e.path = e.path[:len(e.path)-1]
				if len(e.dst) > start {
					e.segs = append(e.segs, seg{f.order, start, len(e.dst)})
				}
			}
			e.space()
			if e.consume(',') {
				continue
			}
			if e.consume('}') {
				break
			}
			return e.unexpected()
		}
	}
	e.orderBody(body, e.segs[segBase:])
	e.segs, e.seen = e.segs[:segBase], e.seen[:seenBase]
	e.depth--
	return nil
}

// see marks bit of the seen set at base and reports whether it was
// clear.
func (e *encoder) see(base, bit int) bool {
	w, m := base+bit/64, uint64(1)<<(bit%64)
	if e.seen[w]&m != 0 {
		return false
	}
	e.seen[w] |= m
	return true
}

// orderBody rearranges the message body from body to the end of dst,
// made of segs, into field order, if it is not in it.
func (e *encoder) orderBody(body int, segs []seg) {
	if slices.IsSortedFunc(segs, cmpSeg) {
		return
	}
	slices.SortFunc(segs, cmpSeg)
	e.buf = append(e.buf[:0], e.dst[body:]...)
	w := body
	for _, s := range segs {
		w += copy(e.dst[w:], e.buf[s.start-body:s.end-body])
	}
}

func cmpSeg(a, b seg) int { return int(a.order) - int(b.order) }

// field encodes the value that comes next (not null) as f's.
func (e *encoder) field(f *planField) error {
	switch {
	case f.key != nil:
		return e.mapValue(f)
	case f.list:
		return e.list(f)
	case f.kind == protoreflect.MessageKind:
		e.dst = append(e.dst, f.tag...)
		return e.nested(f.msg)
	}
	start := len(e.dst)
	e.dst = append(e.dst, f.tag...)
	zero, err := e.scalar(f)
	if err != nil {
		return err
	}
	if zero && !f.presence {
		e.dst = e.dst[:start] // proto3's implicit presence: a default is not written
	}
	return nil
}

// nested encodes a message of pl with its length.
func (e *encoder) nested(pl *plan) error {
	pos := len(e.dst)
	e.dst = append(e.dst, 0)
	if err := e.message(pl); err != nil {
		return err
	}
	e.finishLen(pos, 1)
	return nil
}

// finishLen writes the length of what follows the reserved bytes at pos
// there, as a varint of its own size (what proto.Marshal writes),
// moving what follows if it needs more or fewer bytes.
func (e *encoder) finishLen(pos, reserved int) {
	n := len(e.dst) - pos - reserved
	switch size := protowire.SizeVarint(uint64(n)); {
	case size > reserved:
		e.dst = slices.Grow(e.dst, size-reserved)[:pos+size+n]
		copy(e.dst[pos+size:], e.dst[pos+reserved:pos+reserved+n])
	case size < reserved:
		copy(e.dst[pos+size:], e.dst[pos+reserved:])
		e.dst = e.dst[:pos+size+n]
	}
	protowire.AppendVarint(e.dst[:pos], uint64(n))
}

// list encodes the array that comes next as f's elements.
func (e *encoder) list(f *planField) error {
	e.space()
	if !e.consume('[') {
		return e.unexpected()
	}
	e.space()
	if e.consume(']') {
		return nil // an empty list is not written, packed or not
	}
	pos := 0
	if f.packed {
		e.dst = append(e.dst, f.tag...)
		pos = len(e.dst)
		e.dst = append(e.dst, 0)
	}
	last := len(e.path) - 1
	for i := 0; ; i++ {
		e.path[last].index = i
		e.space()
		switch {
		case f.kind == protoreflect.MessageKind:
			e.dst = append(e.dst, f.tag...)
			if err := e.nested(f.msg); err != nil {
				return err
			}
		default:
			if !f.packed {
				e.dst = append(e.dst, f.tag...)
			}
			if _, err := e.scalar(f); err != nil {
				return err
			}
		}
		e.space()
		if e.consume(',') {
			continue
		}
		if e.consume(']') {
			break
		}
		return e.unexpected()
	}
	e.path[last].index = -1
	if f.packed {
		e.finishLen(pos, 1)
	}
	return nil
}

// mapValue encodes the object that comes next as f's map entries, in
// key order.
func (e *encoder) mapValue(f *planField) error {
	e.space()
	if !e.consume('{') {
		return e.unexpected()
	}
	e.space()
	if e.consume('}') {
		return nil
	}
	region, base, last := len(e.dst), len(e.ents), len(e.path)-1
	for {
		e.space()
		keyStart := e.i
		ent := entry{start: len(e.dst)}
		e.dst = append(e.dst, f.tag...)
		lenPos := len(e.dst)
		e.dst = append(e.dst, 0)
		e.dst = append(e.dst, f.key.tag...)
		if f.key.kind == protoreflect.StringKind {
			n, ok := e.str()
			if !ok {
				return e.unexpectedAt(keyStart)
			}
			ent.kstart, ent.kend = len(e.dst)-n, len(e.dst)
		} else {
			s, ok := e.content()
			if !ok {
				return e.unexpectedAt(keyStart)
			}
			if ent.key, ok = e.mapKey(f.key.kind, s); !ok {
				return e.fail(keyStart, "invalid value for %v key: %s", f.key.kind, e.src[keyStart:e.i])
			}
		}
		e.path[last].keyStart, e.path[last].keyE = keyStart, e.i
		e.space()
		if !e.consume(':') {
			return e.unexpected()
		}
		e.space()
		e.dst = append(e.dst, f.val.tag...)
		if f.val.kind == protoreflect.MessageKind {
			if err := e.nested(f.val.msg); err != nil {
				return err
			}
		} else if _, err := e.scalar(f.val); err != nil {
			return err
		}
		end := len(e.dst)
		e.finishLen(lenPos, 1)
		shift := len(e.dst) - end
		ent.kstart, ent.kend, ent.end = ent.kstart+shift, ent.kend+shift, len(e.dst)
		e.ents = append(e.ents, ent)
		e.space()
		if e.consume(',') {
			continue
		}
		if e.consume('}') {
			break
		}
		return e.unexpected()
	}
	e.path[last].keyStart = -1
	ents := e.ents[base:]
	strKeys := f.key.kind == protoreflect.StringKind
	cmp := func(a, b entry) int {
		if strKeys {
			return bytes.Compare(e.dst[a.kstart:a.kend], e.dst[b.kstart:b.kend])
		}
		switch {
		case a.key < b.key:
			return -1
		case a.key > b.key:
			return 1
		}
		return 0
	}
	sorted := true
	for i := 1; i < len(ents); i++ {
		switch c := cmp(ents[i-1], ents[i]); {
		case c == 0:
			return e.fail(region, "duplicate map key in %s", f.name)
		case c > 0:
			sorted = false
		}
	}
	if !sorted {
		slices.SortFunc(ents, cmp)
		for i := 1; i < len(ents); i++ {
			if cmp(ents[i-1], ents[i]) == 0 {
				return e.fail(region, "duplicate map key in %s", f.name)
			}
		}
		e.buf = append(e.buf[:0], e.dst[region:]...)
		w := region
		for _, en := range ents {
			w += copy(e.dst[w:], e.buf[en.start-region:en.end-region])
		}
	}
	e.ents = e.ents[:base]
	return nil
}

// mapKey reads a map key of kind k (protojson's unmarshalMapKey) and
// appends its encoding; the order key is as entry's.
func (e *encoder) mapKey(k protoreflect.Kind, s []byte) (uint64, bool) {
	str := unsafeString(s)
	switch k {
	case protoreflect.BoolKind:
		switch str {
		case "true":
			e.dst = append(e.dst, 1)
			return 1, true
		case "false":
			e.dst = append(e.dst, 0)
			return 0, true
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, err := strconv.ParseInt(str, 10, 32); err == nil {
			e.dst = appendInt(e.dst, k, n)
			return uint64(n) ^ 1<<63, true
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if n, err := strconv.ParseInt(str, 10, 64); err == nil {
			e.dst = appendInt(e.dst, k, n)
			return uint64(n) ^ 1<<63, true
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, err := strconv.ParseUint(str, 10, 32); err == nil {
			e.dst = appendUint(e.dst, k, n)
			return n, true
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, err := strconv.ParseUint(str, 10, 64); err == nil {
			e.dst = appendUint(e.dst, k, n)
			return n, true
		}
	}
	return 0, false
}

// scalar encodes the value that comes next as a value of f (not a
// message) without a tag, and reports whether it is the default one.
func (e *encoder) scalar(f *planField) (zero bool, err error) {
	start := e.i
	switch f.kind {
	case protoreflect.BoolKind:
		switch {
		case e.literal("true"):
			e.dst = append(e.dst, 1)
			return false, nil
		case e.literal("false"):
			e.dst = append(e.dst, 0)
			return true, nil
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if n, ok := e.int(32); ok {
			e.dst = appendInt(e.dst, f.kind, n)
			return n == 0, nil
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if n, ok := e.int(64); ok {
			e.dst = appendInt(e.dst, f.kind, n)
			return n == 0, nil
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if n, ok := e.uint(32); ok {
			e.dst = appendUint(e.dst, f.kind, n)
			return n == 0, nil
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if n, ok := e.uint(64); ok {
			e.dst = appendUint(e.dst, f.kind, n)
			return n == 0, nil
		}
	case protoreflect.FloatKind:
		if v, ok := e.float(32); ok {
			bits := math.Float32bits(float32(v))
			e.dst = protowire.AppendFixed32(e.dst, bits)
			return bits == 0, nil // -0 and NaN are values
		}
	case protoreflect.DoubleKind:
		if v, ok := e.float(64); ok {
			bits := math.Float64bits(v)
			e.dst = protowire.AppendFixed64(e.dst, bits)
			return bits == 0, nil
		}
	case protoreflect.StringKind:
		if n, ok := e.str(); ok {
			return n == 0, nil
		}
	case protoreflect.BytesKind:
		if n, ok := e.bytes(); ok {
			return n == 0, nil
		}
	case protoreflect.EnumKind:
		if c, _ := e.peek(); c == '"' {
			s, ok := e.content()
			if !ok {
				break
			}
			n, ok := f.enum[string(s)]
			if !ok {
				break
			}
			e.dst = protowire.AppendVarint(e.dst, uint64(n))
			return n == 0, nil
		}
		if tok, ok := e.number(); ok {
			if n, ok := intOf(tok, 32); ok {
				e.dst = protowire.AppendVarint(e.dst, uint64(n))
				return n == 0, nil
			}
		}
	}
	return false, e.fail(start, "invalid value for %v field %s: %s", f.kind, e.pathString(), e.excerpt(start))
}

func appendInt(b []byte, k protoreflect.Kind, n int64) []byte {
	switch k {
	case protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.AppendVarint(b, protowire.EncodeZigZag(n))
	case protoreflect.Sfixed32Kind:
		return protowire.AppendFixed32(b, uint32(n))
	case protoreflect.Sfixed64Kind:
		return protowire.AppendFixed64(b, uint64(n))
	}
	return protowire.AppendVarint(b, uint64(n)) // int32 sign-extended, as proto writes it
}

func appendUint(b []byte, k protoreflect.Kind, n uint64) []byte {
	switch k {
	case protoreflect.Fixed32Kind:
		return protowire.AppendFixed32(b, uint32(n))
	case protoreflect.Fixed64Kind:
		return protowire.AppendFixed64(b, n)
	}
	return protowire.AppendVarint(b, n)
}

// int reads a signed integer of bits bits: a number, or a string holding
// exactly one (protojson's unmarshalInt).
func (e *encoder) int(bits int) (int64, bool) {
	tok, ok := e.numeric()
	if !ok {
		return 0, false
	}
	return intOf(tok, bits)
}

// uint is int for an unsigned integer.
func (e *encoder) uint(bits int) (uint64, bool) {
	tok, ok := e.numeric()
	if !ok {
		return 0, false
	}
	neg, mag, ok := integer(tok)
	if !ok || neg || bits == 32 && mag > math.MaxUint32 {
		return 0, false
	}
	return mag, true
}

// float reads a float of bits bits: a number, a string holding exactly
// one, or "NaN", "Infinity", "-Infinity" (protojson's unmarshalFloat).
func (e *encoder) float(bits int) (float64, bool) {
	var tok []byte
	var ok bool
	if c, _ := e.peek(); c == '"' {
		var s []byte
		if s, ok = e.content(); !ok {
			return 0, false
		}
		switch string(s) {
		case "NaN":
			return math.NaN(), true
		case "Infinity":
			return math.Inf(+1), true
		case "-Infinity":
			return math.Inf(-1), true
		}
		if !wholeNumber(s) {
			return 0, false
		}
		tok = s
	} else if tok, ok = e.number(); !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(unsafeString(tok), bits)
	return f, err == nil
}

// numeric reads a number token, or a string whose whole value is one
// (no space around it), and returns the number's text.
func (e *encoder) numeric() ([]byte, bool) {
	if c, _ := e.peek(); c == '"' {
		s, ok := e.content()
		if !ok || !wholeNumber(s) {
			return nil, false
		}
		return s, true
	}
	return e.number()
}

// wholeNumber reports whether s is one number token of protojson's
// grammar and nothing else: not even space around it (strings.TrimSpace
// must leave it as it is).
func wholeNumber(s []byte) bool {
	if len(strings.TrimSpace(unsafeString(s))) != len(s) {
		return false
	}
	n, ok := numberLen(s)
	return ok && n == len(s)
}

// number reads a number token.
func (e *encoder) number() ([]byte, bool) {
	n, ok := numberLen(e.src[e.i:])
	if !ok {
		return nil, false
	}
	tok := e.src[e.i : e.i+n]
	e.i += n
	return tok, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// numberLen is protojson's parseNumber: the length of the number token
// at the start of s. Like it, it takes an "e" or "e+" that no digit
// follows as part of the token ("1e}" is the token "1e").
func numberLen(s []byte) (int, bool) {
	in, n := s, 0
	if len(s) == 0 {
		return 0, false
	}
	if s[0] == '-' {
		s, n = s[1:], n+1
		if len(s) == 0 {
			return 0, false
		}
	}
	switch {
	case s[0] == '0':
		s, n = s[1:], n+1
	case '1' <= s[0] && s[0] <= '9':
		s, n = s[1:], n+1
		for len(s) > 0 && isDigit(s[0]) {
			s, n = s[1:], n+1
		}
	default:
		return 0, false
	}
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		s, n = s[2:], n+2
		for len(s) > 0 && isDigit(s[0]) {
			s, n = s[1:], n+1
		}
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s, n = s[1:], n+1
		if s[0] == '+' || s[0] == '-' {
			s, n = s[1:], n+1
			if len(s) == 0 {
				return 0, false
			}
		}
		for len(s) > 0 && isDigit(s[0]) {
			s, n = s[1:], n+1
		}
	}
	if n < len(in) && notDelim(in[n]) {
		return 0, false
	}
	return n, true
}

// notDelim is protojson's isNotDelim: a byte that may not follow a
// number or literal token.
func notDelim(c byte) bool {
	return c == '-' || c == '+' || c == '.' || c == '_' ||
		'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c)
}

// intOf is the signed integer of bits bits a number token stands for
// (protojson's Token.Int).
func intOf(tok []byte, bits int) (int64, bool) {
	neg, mag, ok := integer(tok)
	if !ok {
		return 0, false
	}
	limit := uint64(1) << (bits - 1)
	if neg {
		if mag > limit {
			return 0, false
		}
		return -int64(mag), true
	}
	if mag >= limit {
		return 0, false
	}
	return int64(mag), true
}

// integer is the sign and magnitude of the integer a number token
// stands for, by protojson's parseNumberParts and normalizeToIntString:
// 1.5e1 is 15, 100e-2 is 1, 1.5 is no integer, and a number whose
// integer part and exponent make more than 20 digits is none either.
func integer(tok []byte) (neg bool, mag uint64, ok bool) {
	s := tok
	if len(s) == 0 {
		return false, 0, false
	}
	if s[0] == '-' {
		neg, s = true, s[1:]
		if len(s) == 0 {
			return false, 0, false
		}
	}
	var intp, frac, exp []byte
	switch {
	case s[0] == '0':
		s = s[1:]
	case '1' <= s[0] && s[0] <= '9':
		n := 1
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		intp, s = s[:n], s[n:]
	default:
		return false, 0, false
	}
	if len(s) >= 2 && s[0] == '.' && isDigit(s[1]) {
		n := 2
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		frac, s = s[1:n], s[n:]
	}
	if len(s) >= 2 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		n := 0
		if s[0] == '+' || s[0] == '-' {
			n++
			if len(s) == 1 {
				return false, 0, false
			}
		}
		for n < len(s) && isDigit(s[n]) {
			n++
		}
		exp = s[:n]
	}
	frac = bytes.TrimRight(frac, "0")
	if len(intp) == 0 && len(frac) == 0 {
		return false, 0, true // zero, whatever its sign or exponent
	}
	x := 0
	if len(exp) > 0 {
		v, err := strconv.ParseInt(unsafeString(exp), 10, 32)
		if err != nil {
			return false, 0, false
		}
		x = int(v)
	}
	// The digits are intp, frac and x-len(frac) zeros, or intp without
	// its last -x (zero) digits.
	add := func(d byte) bool {
		v := uint64(d - '0')
		if mag > (math.MaxUint64-v)/10 {
			return false
		}
		mag = mag*10 + v
		return true
	}
	if x >= 0 {
		if len(frac) > x || len(intp)+x > 20 {
			return false, 0, false
		}
		for _, d := range intp {
			if !add(d) {
				return false, 0, false
			}
		}
		for _, d := range frac {
			if !add(d) {
				return false, 0, false
			}
		}
		for range x - len(frac) {
			if !add('0') {
				return false, 0, false
			}
		}
		return neg, mag, true
	}
	if len(frac) > 0 {
		return false, 0, false
	}
	index := len(intp) + x
	if index <= 0 {
		return false, 0, false // index 0: the leading digit, never 0, is shifted out
	}
	for _, d := range intp[index:] {
		if d != '0' {
			return false, 0, false
		}
	}
	for _, d := range intp[:index] {
		if !add(d) {
			return false, 0, false
		}
	}
	return neg, mag, true
}

// str encodes the string that comes next with its length, and returns
// the length of its value.
func (e *encoder) str() (int, bool) {
	end, plain, ok := e.stringEnd()
	if !ok {
		return 0, false
	}
	raw := e.src[e.i+1 : end]
	if plain {
		e.dst = protowire.AppendVarint(e.dst, uint64(len(raw)))
		e.dst = append(e.dst, raw...)
		e.i = end + 1
		return len(raw), true
	}
	// The value is never longer than its escaped form.
	reserved := protowire.SizeVarint(uint64(len(raw)))
	pos := len(e.dst)
	e.dst = slices.Grow(e.dst, reserved)[:pos+reserved]
	if e.dst, ok = unescape(e.dst, raw); !ok {
		return 0, false
	}
	n := len(e.dst) - pos - reserved
	e.finishLen(pos, reserved)
	e.i = end + 1
	return n, true
}

// Base64 in every form protojson's unmarshalBytes accepts.
var (
	b64Std    = base64.StdEncoding
	b64URL    = base64.URLEncoding
	b64RawStd = base64.StdEncoding.WithPadding(base64.NoPadding)
	b64RawURL = base64.URLEncoding.WithPadding(base64.NoPadding)
)

// bytes encodes the base64 string that comes next as its bytes with
// their length, as protojson's unmarshalBytes reads it: URL alphabet if
// it has - or _, unpadded if its length is not a multiple of 4.
func (e *encoder) bytes() (int, bool) {
	if c, _ := e.peek(); c != '"' {
		return 0, false
	}
	s, ok := e.content()
	if !ok {
		return 0, false
	}
	url, raw := bytes.ContainsAny(s, "-_"), len(s)%4 != 0
	enc := b64Std
	switch {
	case url && raw:
		enc = b64RawURL
	case url:
		enc = b64URL
	case raw:
		enc = b64RawStd
	}
	most := enc.DecodedLen(len(s))
	reserved := protowire.SizeVarint(uint64(most))
	pos := len(e.dst)
	e.dst = slices.Grow(e.dst, reserved+most)[:pos+reserved+most]
	n, err := enc.Decode(e.dst[pos+reserved:], s)
	if err != nil {
		return 0, false
	}
	e.dst = e.dst[:pos+reserved+n]
	e.finishLen(pos, reserved)
	return n, true
}

// content reads the string that comes next and returns its value: the
// input itself when it has no escape, else e.tmp (until the next call).
func (e *encoder) content() ([]byte, bool) {
	end, plain, ok := e.stringEnd()
	if !ok {
		return nil, false
	}
	raw := e.src[e.i+1 : end]
	if !plain {
		if e.tmp, ok = unescape(e.tmp[:0], raw); !ok {
			return nil, false
		}
		raw = e.tmp
	}
	e.i = end + 1
	return raw, true
}

// stringEnd finds the closing quote of the string that comes next;
// plain reports a string without escapes, control characters or
// non-ASCII bytes, whose value is its text.
func (e *encoder) stringEnd() (end int, plain, ok bool) {
	if e.i >= len(e.src) || e.src[e.i] != '"' {
		return 0, false, false
	}
	plain = true
	for j := e.i + 1; j < len(e.src); j++ {
		switch c := e.src[j]; {
		case c == '"':
			return j, plain, true
		case c == '\\':
			plain = false
			j++
		case c < 0x20 || c >= utf8.RuneSelf:
			plain = false
		}
	}
	return 0, false, false
}

// unescape appends the value of a string's text (between its quotes) to
// dst by the rules of protojson's parseString: no control character, no
// invalid UTF-8, the JSON escapes, a \u surrogate only in a valid pair.
func unescape(dst, raw []byte) ([]byte, bool) {
	for i := 0; i < len(raw); {
		c := raw[i]
		switch {
		case c == '\\':
			if i+1 >= len(raw) {
				return dst, false
			}
			switch c := raw[i+1]; c {
			case '"', '\\', '/':
				dst = append(dst, c)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := hex4(raw, i+2)
				if !ok {
					return dst, false
				}
				if utf16.IsSurrogate(r) {
					i += 6
					if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
						return dst, false
					}
					r2, ok := hex4(raw, i+2)
					if r = utf16.DecodeRune(r, r2); !ok || r == utf8.RuneError {
						return dst, false
					}
				}
				dst = utf8.AppendRune(dst, r)
				i += 6
				continue
			default:
				return dst, false
			}
			i += 2
		case c < 0x20:
			return dst, false
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			i++
		default:
			r, n := utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				return dst, false
			}
			dst = append(dst, raw[i:i+n]...)
			i += n
		}
	}
	return dst, true
}

// hex4 reads the four hex digits at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

func (e *encoder) space() {
	for e.i < len(e.src) {
		switch e.src[e.i] {
		case ' ', '\t', '\n', '\r':
			e.i++
		default:
			return
		}
	}
}

func (e *encoder) peek() (byte, bool) {
	if e.i < len(e.src) {
		return e.src[e.i], true
	}
	return 0, false
}

func (e *encoder) consume(c byte) bool {
	if e.i < len(e.src) && e.src[e.i] == c {
		e.i++
		return true
	}
	return false
}

// literal consumes lit (true, false, null) if it comes next as a token:
// followed by a delimiter, as protojson's matchWithDelim wants.
func (e *encoder) literal(lit string) bool {
	rest := e.src[e.i:]
	if len(rest) < len(lit) || string(rest[:len(lit)]) != lit || len(rest) > len(lit) && notDelim(rest[len(lit)]) {
		return false
	}
	e.i += len(lit)
	return true
}

// unsafeString is b as a string without a copy, for a use that does not
// outlive b.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// fail is an *Error at offset pos of the input, naming the field path.
func (e *encoder) fail(pos int, format string, args ...any) error {
	line, col := position(e.src, pos)
	return &Error{Message: e.name, Field: e.pathString(),
		Reason: fmt.Sprintf("(line %d:%d): ", line, col) + fmt.Sprintf(format, args...)}
}

// failAt is fail for the member name of the object being encoded.
func (e *encoder) failAt(pos int, name, format string, args ...any) error {
	err := e.fail(pos, format, args...).(*Error)
	if err.Field != "" {
		name = err.Field + "." + name
	}
	err.Field = name
	return err
}

// unexpected is a syntax error at the token that comes next.
func (e *encoder) unexpected() error { return e.unexpectedAt(e.i) }

func (e *encoder) unexpectedAt(pos int) error {
	line, col := position(e.src, pos)
	reason := fmt.Sprintf("syntax error (line %d:%d): unexpected token %s", line, col, e.excerpt(pos))
	if pos >= len(e.src) {
		reason = fmt.Sprintf("syntax error (line %d:%d): unexpected end of the payload", line, col)
	}
	if p := e.pathString(); p != "" {
		reason += " in field " + p
	}
	return &Error{Message: e.name, Field: e.pathString(), Reason: reason}
}

// excerpt is the JSON value at pos, or its first 40 bytes, for an error.
func (e *encoder) excerpt(pos int) string {
	if pos >= len(e.src) {
		return ""
	}
	sc := jsontext.NewScanner(e.src[pos:])
	end := 1
	if sc.SkipValue() {
		end = sc.Offset()
	}
	if end > 40 {
		return string(e.src[pos:pos+40]) + "…"
	}
	return string(e.src[pos : pos+end])
}

// position is the line and column of offset pos (protojson's Position).
func position(b []byte, pos int) (line, col int) {
	b = b[:min(pos, len(b))]
	line = bytes.Count(b, []byte("\n")) + 1
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return line, utf8.RuneCount(b) + 1
}

// pathString is the path of the field being encoded: "lines[2].qty",
// `attrs["k"]`.
func (e *encoder) pathString() string {
	var b strings.Builder
	for i, s := range e.path {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(s.f.name)
		if s.index >= 0 {
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		}
		if s.keyStart >= 0 {
			b.WriteString("[" + string(e.src[s.keyStart:s.keyE]) + "]")
		}
	}
	return b.String()
}
