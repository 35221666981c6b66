package avrojson

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
)

type scanner = jsontext.Scanner

func newScanner(b []byte) *scanner { return jsontext.NewScanner(b) }

// step is one step of the path to the value being encoded: a member of
// a record or map (name), or an element of an array (index >= 0).
type step struct {
	name  string
	index int
}

// member is a record's JSON member: where its name token and its value
// lie in the input.
type member struct {
	nameStart, nameEnd int
	start              int
	used               bool
}

// encoder appends to dst. path and members are stacks the nested values
// share, so they cost no allocation once grown; the path becomes text
// only in an error.
type encoder struct {
	dst     []byte
	path    []step
	members []member
	scratch [8]byte
}

// encoders recycles the encoders' stacks across events.
var encoders = sync.Pool{New: func() any { return new(encoder) }}

// unsafeString is b as a string without a copy, for a comparison that
// does not outlive b.
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

func (e *encoder) push(name string, index int) { e.path = append(e.path, step{name, index}) }
func (e *encoder) pop()                        { e.path = e.path[:len(e.path)-1] }

func (e *encoder) fail(format string, args ...any) error {
	var b strings.Builder
	for _, s := range e.path {
		switch {
		case s.index >= 0:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case b.Len() > 0:
			b.WriteString("." + s.name)
		default:
			b.WriteString(s.name)
		}
	}
	return &Error{Path: b.String(), Reason: fmt.Sprintf(format, args...)}
}

// value encodes the JSON value sc is at (after any space) against n.
func (e *encoder) value(n *node, sc *scanner) error {
	sc.SkipSpace()
	switch n.kind {
	case kNull:
		if !sc.ConsumeLiteral("null") {
			return e.fail("want null")
		}
		return nil
	case kBoolean:
		switch {
		case sc.ConsumeLiteral("true"):
			e.dst = append(e.dst, 1)
		case sc.ConsumeLiteral("false"):
			e.dst = append(e.dst, 0)
		default:
			return e.fail("want true or false")
		}
		return nil
	case kInt, kLong:
		return e.integer(n, sc)
	case kFloat, kDouble:
		tok, ok := sc.NumberToken()
		if !ok {
			return e.fail("want a number")
		}
		if n.kind == kFloat {
			f, err := strconv.ParseFloat(string(tok), 32)
			if err != nil {
				return e.fail("%s is out of range for a float", tok)
			}
			e.dst = binary.LittleEndian.AppendUint32(e.dst, math.Float32bits(float32(f)))
			return nil
		}
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return e.fail("%s is out of range for a double", tok)
		}
		e.dst = binary.LittleEndian.AppendUint64(e.dst, math.Float64bits(f))
		return nil
	case kBytes, kFixed:
		if n.logical == lDecimal {
			return e.decimal(n, sc)
		}
		s, err := e.stringValue(sc)
		if err != nil {
			return err
		}
		if n.kind == kBytes {
			e.dst = appendLong(e.dst, int64(codePoints(s)))
		} else if c := codePoints(s); c != n.size {
			return e.fail("want %d bytes for fixed %s, have %d", n.size, n.name, c)
		}
		for _, r := range s {
			if r > 0xff {
				return e.fail("bytes are written as a string of code points 0 to 255 (\\u0000 to \\u00ff); %U is not one", r)
			}
			e.dst = append(e.dst, byte(r))
		}
		return nil
	case kString:
		start := sc.Offset()
		if tok, plain, err := sc.StringToken(); err == nil && plain && n.logical == lNone {
			e.dst = appendLong(e.dst, int64(len(tok)-2)) // the common case: no copy
			e.dst = append(e.dst, tok[1:len(tok)-1]...)
			return nil
		}
		sc.Seek(start)
		s, err := e.stringValue(sc)
		if err != nil {
			return err
		}
		if n.logical == lUUID && !isUUID(s) {
			return e.fail("%q is not a UUID", truncate(s))
		}
		e.dst = appendLong(e.dst, int64(len(s)))
		e.dst = append(e.dst, s...)
		return nil
	case kEnum:
		start := sc.Offset()
		if tok, plain, err := sc.StringToken(); err == nil && plain {
			for i, sym := range n.symbols {
				if sym == string(tok[1:len(tok)-1]) {
					e.dst = appendLong(e.dst, int64(i))
					return nil
				}
			}
		}
		sc.Seek(start)
		s, err := e.stringValue(sc)
		if err != nil {
			return err
		}
		for i, sym := range n.symbols {
			if sym == s {
				e.dst = appendLong(e.dst, int64(i))
				return nil
			}
		}
		return e.fail("%q is not a symbol of enum %s (%s)", truncate(s), n.name, strings.Join(n.symbols, ", "))
	case kRecord:
		return e.record(n, sc)
	case kArray:
		return e.array(n, sc)
	case kMap:
		return e.mapValue(n, sc)
	case kUnion:
		return e.union(n, sc)
	}
	return e.fail("unsupported schema node")
}

func (e *encoder) integer(n *node, sc *scanner) error {
	var v int64
	if c, _ := sc.Peek(); c == '"' && n.logical != lNone {
		s, err := e.stringValue(sc)
		if err != nil {
			return err
		}
		if v, err = parseTime(n.logical, s); err != nil {
			return e.fail("%v", err)
		}
	} else {
		tok, ok := sc.NumberToken()
		if !ok {
			if n.logical != lNone {
				return e.fail("want a number or a %s string", n.logicalName())
			}
			return e.fail("want an integer")
		}
		var err error
		if v, err = strconv.ParseInt(string(tok), 10, 64); err != nil {
			return e.fail("%s is not a 64-bit integer", tok)
		}
	}
	if n.kind == kInt && (v < math.MinInt32 || v > math.MaxInt32) {
		return e.fail("%d is out of range for an int (32 bits)", v)
	}
	e.dst = appendLong(e.dst, v)
	return nil
}

func (n *node) logicalName() string {
	switch n.logical {
	case lDate:
		return "date (2006-01-02)"
	case lTimeMillis, lTimeMicros:
		return "time (15:04:05.000)"
	case lTimestampMillis, lTimestampMicros:
		return "RFC 3339 timestamp"
	case lLocalTimestampMillis, lLocalTimestampMicros:
		return "local timestamp (2006-01-02T15:04:05)"
	}
	return "logical"
}

// parseTime reads a date, time or timestamp string as its logical
// type's number.
func parseTime(l logical, s string) (int64, error) {
	switch l {
	case lDate:
		t, err := time.Parse(time.DateOnly, s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a date (2006-01-02)", truncate(s))
		}
		return t.Unix() / 86400, nil
	case lTimeMillis, lTimeMicros:
		t, err := time.Parse("15:04:05.999999999", s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a time of day (15:04:05.000)", truncate(s))
		}
		d := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute +
			time.Duration(t.Second())*time.Second + time.Duration(t.Nanosecond())
		if l == lTimeMillis {
			return d.Milliseconds(), nil
		}
		return d.Microseconds(), nil
	case lTimestampMillis, lTimestampMicros:
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("%q is not an RFC 3339 timestamp", truncate(s))
		}
		if l == lTimestampMillis {
			return t.UnixMilli(), nil
		}
		return t.UnixMicro(), nil
	case lLocalTimestampMillis, lLocalTimestampMicros:
		t, err := time.Parse("2006-01-02T15:04:05.999999999", s)
		if err != nil {
			return 0, fmt.Errorf("%q is not a local timestamp (2006-01-02T15:04:05)", truncate(s))
		}
		if l == lLocalTimestampMillis {
			return t.UnixMilli(), nil
		}
		return t.UnixMicro(), nil
	}
	return 0, fmt.Errorf("a string is not a value of this type")
}

// decimal encodes a JSON number, or a string of one, as the unscaled
// two's-complement integer of a decimal of n's scale.
func (e *encoder) decimal(n *node, sc *scanner) error {
	var text string
	if c, _ := sc.Peek(); c == '"' {
		s, err := e.stringValue(sc)
		if err != nil {
			return err
		}
		text = s
	} else {
		tok, ok := sc.NumberToken()
		if !ok {
			return e.fail("want a decimal number, or a string of one")
		}
		text = string(tok)
	}
	if v, ok, err := smallDecimal(text, n.scale); err != nil {
		return e.fail("%s has more than %d fraction digits (the decimal's scale)", truncate(text), n.scale)
	} else if ok {
		return e.appendDecimal(n, text, appendTwos(e.scratch[:0], v))
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok || strings.ContainsAny(text, "/") {
		return e.fail("%q is not a decimal number", truncate(text))
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n.scale)), nil)))
	if !r.IsInt() {
		return e.fail("%s has more than %d fraction digits (the decimal's scale)", truncate(text), n.scale)
	}
	return e.appendDecimal(n, text, twosComplement(r.Num()))
}

// appendDecimal appends a decimal's two's-complement bytes b: with their
// length for bytes, sign-extended to the size for fixed.
func (e *encoder) appendDecimal(n *node, text string, b []byte) error {
	if n.kind == kBytes {
		e.dst = appendLong(e.dst, int64(len(b)))
		e.dst = append(e.dst, b...)
		return nil
	}
	if len(b) > n.size {
		return e.fail("%s does not fit fixed %s of %d bytes", truncate(text), n.name, n.size)
	}
	pad := byte(0)
	if b[0]&0x80 != 0 {
		pad = 0xff
	}
	for range n.size - len(b) {
		e.dst = append(e.dst, pad)
	}
	e.dst = append(e.dst, b...)
	return nil
}

// smallDecimal reads text ("-12.30") as the unscaled int64 of a decimal
// of scale when it is plain digits that fit (the common case, without
// math/big); ok is false for anything else (an exponent, too many
// digits), which the caller reads with math/big. err: more fraction digits
// than scale, other than trailing zeros.
func smallDecimal(text string, scale int) (v int64, ok bool, err error) {
	s := text
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole)+scale > 18 {
		return 0, false, nil
	}
	for i := range len(frac) {
		if frac[i] < '0' || frac[i] > '9' {
			return 0, false, nil
		}
		if i >= scale && frac[i] != '0' {
			return 0, false, errors.New("too many fraction digits")
		}
	}
	for i := range len(whole) {
		if whole[i] < '0' || whole[i] > '9' {
			return 0, false, nil
		}
		v = v*10 + int64(whole[i]-'0')
	}
	for i := range scale {
		v *= 10
		if i < len(frac) {
			v += int64(frac[i] - '0')
		}
	}
	if neg {
		v = -v
	}
	return v, true, nil
}

// appendTwos appends v as the shortest big-endian two's-complement bytes.
func appendTwos(dst []byte, v int64) []byte {
	n := 1
	for n < 8 && (v >= 0 && v >= 1<<(8*n-1) || v < 0 && v < -(1<<(8*n-1))) {
		n++
	}
	for i := n - 1; i >= 0; i-- {
		dst = append(dst, byte(v>>(8*i)))
	}
	return dst
}

// twosComplement is x as the shortest big-endian two's-complement bytes.
func twosComplement(x *big.Int) []byte {
	if x.Sign() >= 0 {
		b := x.Bytes()
		if len(b) == 0 || b[0]&0x80 != 0 {
			b = append([]byte{0}, b...)
		}
		return b
	}
	n := new(big.Int).Not(x).BitLen()/8 + 1 // -x-1 fits in 8n-1 bits
	y := new(big.Int).Add(x, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
	return y.FillBytes(make([]byte, n))
}

func (e *encoder) record(n *node, sc *scanner) error {
	base := len(e.members)
	defer func() { e.members = e.members[:base] }()
	if err := e.objectMembers(n, sc); err != nil {
		return err
	}
	after := sc.Offset()
	src := sc.Source()
	for _, f := range n.fields {
		i := findMember(src, e.members[base:], f.name)
		e.push(f.name, -1)
		if i < 0 {
			if !f.hasDef {
				return e.fail("is required by %s and has no default", n.name)
			}
			e.dst = append(e.dst, f.defBytes...)
			e.pop()
			continue
		}
		m := &e.members[base+i]
		m.used = true
		sc.Seek(m.start)
		if err := e.value(f.typ, sc); err != nil {
			return err
		}
		e.pop()
	}
	sc.Seek(after)
	for _, m := range e.members[base:] {
		if !m.used {
			name, _ := jsontext.Unquote(src[m.nameStart:m.nameEnd])
			e.push(name, -1)
			return e.fail("is not in the schema of %s: a payload for another schema version?", n.name)
		}
	}
	return nil
}

// findMember finds the member named name: compared as the token's text
// when it has no escapes (no copy), decoded when it has.
func findMember(src []byte, ms []member, name string) int {
	for i, m := range ms {
		tok := src[m.nameStart:m.nameEnd]
		if string(tok[1:len(tok)-1]) == name {
			return i
		}
		if bytes.IndexByte(tok, '\\') >= 0 {
			if s, ok := jsontext.Unquote(tok); ok && s == name {
				return i
			}
		}
	}
	return -1
}

// objectMembers reads the object sc is at onto e.members, each value
// skipped (read later, in the schema's field order). A name given twice is
// an error: which one would count is a guess.
func (e *encoder) objectMembers(n *node, sc *scanner) error {
	if !sc.Consume('{') {
		return e.fail("want a %s object", n.name)
	}
	base := len(e.members)
	sc.SkipSpace()
	if sc.Consume('}') {
		return nil
	}
	src := sc.Source()
	for {
		sc.SkipSpace()
		ns := sc.Offset()
		tok, plain, err := sc.StringToken()
		if err != nil {
			return e.fail("invalid JSON object")
		}
		var name string
		if plain {
			name = unsafeString(tok[1 : len(tok)-1]) // compared, never kept
		} else if name, plain = jsontext.Unquote(tok); !plain {
			return e.fail("invalid JSON string")
		}
		if findMember(src, e.members[base:], name) >= 0 {
			e.push(strings.Clone(name), -1)
			return e.fail("is given twice")
		}
		sc.SkipSpace()
		if !sc.Consume(':') {
			return e.fail("invalid JSON object")
		}
		sc.SkipSpace()
		vs := sc.Offset()
		if !sc.SkipValue() {
			e.push(strings.Clone(name), -1)
			return e.fail("invalid JSON value")
		}
		e.members = append(e.members, member{nameStart: ns, nameEnd: ns + len(tok), start: vs})
		sc.SkipSpace()
		if sc.Consume('}') {
			return nil
		}
		if !sc.Consume(',') {
			return e.fail("invalid JSON object")
		}
	}
}

// array encodes a JSON array as one Avro block: its count, the items, 0.
func (e *encoder) array(n *node, sc *scanner) error {
	count, ok := countItems(sc, '[', ']')
	if !ok || !sc.Consume('[') {
		return e.fail("want an array")
	}
	if count > 0 {
		e.dst = appendLong(e.dst, int64(count))
	}
	for i := range count {
		if i > 0 {
			sc.SkipSpace()
			sc.Consume(',')
		}
		e.push("", i)
		if err := e.value(n.elem, sc); err != nil {
			return err
		}
		e.pop()
	}
	sc.SkipSpace()
	sc.Consume(']')
	e.dst = append(e.dst, 0)
	return nil
}

// mapValue encodes a JSON object as one Avro map block.
func (e *encoder) mapValue(n *node, sc *scanner) error {
	count, ok := countItems(sc, '{', '}')
	if !ok || !sc.Consume('{') {
		return e.fail("want an object")
	}
	if count > 0 {
		e.dst = appendLong(e.dst, int64(count))
	}
	for i := range count {
		sc.SkipSpace()
		if i > 0 {
			sc.Consume(',')
			sc.SkipSpace()
		}
		tok, plain, err := sc.StringToken()
		if err != nil {
			return e.fail("invalid JSON object")
		}
		key := string(tok[1 : len(tok)-1])
		if !plain {
			if key, ok = jsontext.Unquote(tok); !ok {
				return e.fail("invalid JSON string")
			}
		}
		e.dst = appendLong(e.dst, int64(len(key)))
		e.dst = append(e.dst, key...)
		sc.SkipSpace()
		sc.Consume(':')
		e.push(key, -1)
		if err := e.value(n.elem, sc); err != nil {
			return err
		}
		e.pop()
	}
	sc.SkipSpace()
	sc.Consume('}')
	e.dst = append(e.dst, 0)
	return nil
}

// countItems counts the elements of the array or object sc is at,
// checking its grammar, and leaves sc where it was; false when it is not
// one.
func countItems(sc *scanner, open, closer byte) (int, bool) {
	start := sc.Offset()
	defer sc.Seek(start)
	if !sc.Consume(open) {
		return 0, false
	}
	sc.SkipSpace()
	if sc.Consume(closer) {
		return 0, true
	}
	for n := 1; ; n++ {
		sc.SkipSpace()
		if open == '{' {
			if _, _, err := sc.StringToken(); err != nil {
				return 0, false
			}
			sc.SkipSpace()
			if !sc.Consume(':') {
				return 0, false
			}
		}
		if !sc.SkipValue() {
			return 0, false
		}
		sc.SkipSpace()
		if sc.Consume(closer) {
			return n, true
		}
		if !sc.Consume(',') {
			return 0, false
		}
	}
}

// union encodes the branch's index and the value: a wrapped value
// ({"branch": value}) in the branch its key names, a bare one in the
// first branch that takes it.
func (e *encoder) union(n *node, sc *scanner) error {
	if c, _ := sc.Peek(); c == '{' {
		if i, ok := wrapped(n, sc); ok {
			e.dst = appendLong(e.dst, int64(i))
			if err := e.value(n.branches[i], sc); err != nil {
				return err
			}
			sc.SkipSpace()
			sc.Consume('}')
			return nil
		}
	}
	var firstErr error
	tried := 0
	start := sc.Offset()
	for i, b := range n.branches {
		if !takes(b, sc) {
			continue
		}
		tried++
		mark, depth := len(e.dst), len(e.path)
		e.dst = appendLong(e.dst, int64(i))
		err := e.value(b, sc)
		if err == nil {
			return nil
		}
		e.dst, e.path = e.dst[:mark], e.path[:depth]
		sc.Seek(start)
		if firstErr == nil {
			firstErr = err
		}
	}
	if tried == 1 {
		return firstErr // the one branch that could: its error is the useful one
	}
	names := make([]string, len(n.branches))
	for i, b := range n.branches {
		names[i] = b.name
	}
	return e.fail("matches no branch of the union [%s]", strings.Join(names, ", "))
}

// wrapped reports whether the object sc is at is the specification's
// {"branch": value} form of a union value, and if so moves sc to the
// value and returns the branch; otherwise sc stays where it was.
func wrapped(n *node, sc *scanner) (int, bool) {
	start := sc.Offset()
	sc.Consume('{')
	sc.SkipSpace()
	tok, plain, err := sc.StringToken()
	if err == nil && plain {
		key := tok[1 : len(tok)-1]
		for i, b := range n.branches {
			if b.name != string(key) && (b.kind < kRecord || shortName(b.name) != string(key)) {
				continue
			}
			sc.SkipSpace()
			if !sc.Consume(':') {
				break
			}
			sc.SkipSpace()
			value := sc.Offset()
			// The object must hold this member alone.
			if !sc.SkipValue() {
				break
			}
			sc.SkipSpace()
			if c, _ := sc.Peek(); c != '}' {
				break
			}
			sc.Seek(value)
			return i, true
		}
	}
	sc.Seek(start)
	return 0, false
}

func shortName(full string) string {
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		return full[i+1:]
	}
	return full
}

// takes reports whether a bare JSON value of the kind sc is at can be a
// value of b.
func takes(b *node, sc *scanner) bool {
	c, _ := sc.Peek()
	switch c {
	case 'n':
		return b.kind == kNull
	case 't', 'f':
		return b.kind == kBoolean
	case '"':
		switch b.kind {
		case kString, kEnum, kBytes, kFixed:
			return true
		case kInt, kLong:
			return b.logical != lNone
		}
		return false
	case '{':
		return b.kind == kRecord || b.kind == kMap
	case '[':
		return b.kind == kArray
	}
	switch b.kind {
	case kInt, kLong, kFloat, kDouble:
		return true
	case kBytes, kFixed:
		return b.logical == lDecimal
	}
	return false
}

// stringValue reads a JSON string's value.
func (e *encoder) stringValue(sc *scanner) (string, error) {
	tok, plain, err := sc.StringToken()
	if err != nil {
		return "", e.fail("want a string")
	}
	if plain {
		return string(tok[1 : len(tok)-1]), nil
	}
	s, ok := jsontext.Unquote(tok)
	if !ok {
		return "", e.fail("invalid JSON string")
	}
	return s, nil
}

func codePoints(s string) int {
	n := 0
	for range s {
		n++
	}
	return n
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}

// truncate bounds a value an error quotes: errors reach dead-letter
// reasons and logs.
func truncate(s string) string {
	if len(s) <= 40 {
		return s
	}
	return string(bytes.ToValidUTF8([]byte(s[:40]), nil)) + "…"
}

// appendLong appends v as Avro's zig-zag varint.
func appendLong(dst []byte, v int64) []byte {
	return binary.AppendUvarint(dst, uint64(v<<1)^uint64(v>>63))
}
