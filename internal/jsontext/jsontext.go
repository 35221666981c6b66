// Package jsontext is the one hand-written JSON scanner and the one JSON
// string writer of the module: package record's headers column parser,
// Debezium JSON expander (record/internal/jsonexpand) and CloudEvents
// structured event, and the relay's reading of a row's trace context, all
// use them. Both work on bytes without reflection and without
// allocating for plain ASCII text, the common case, which encoding/json
// cannot do.
package jsontext

import (
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Scanner reads JSON tokens from a byte slice, from the start. It checks
// the grammar of the tokens it is asked for, not of a whole document: the
// caller drives it.
type Scanner struct {
	b []byte
	i int
}

// NewScanner returns a scanner at the start of b.
func NewScanner(b []byte) *Scanner { return &Scanner{b: b} }

// Errors of StringToken.
var (
	// ErrNotString is a string token asked for where there is none.
	ErrNotString = errors.New("expected a JSON string")
	// ErrUnterminated is a string token without its closing quote.
	ErrUnterminated = errors.New("unterminated JSON string")
)

// SkipSpace skips JSON white space (space, tab, line feed, carriage
// return).
func (s *Scanner) SkipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek returns the next byte, and false at the end.
func (s *Scanner) Peek() (byte, bool) {
	if s.i < len(s.b) {
		return s.b[s.i], true
	}
	return 0, false
}

// AtEnd reports whether the whole input is read.
func (s *Scanner) AtEnd() bool { return s.i >= len(s.b) }

// Consume skips the next byte if it is c and reports whether it was.
func (s *Scanner) Consume(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// ConsumeLiteral skips lit (true, false, null) if it comes next and
// reports whether it did.
func (s *Scanner) ConsumeLiteral(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// StringToken reads the string token that comes next and returns it with
// its quotes, as it stands in the input (no copy). plain reports a token
// whose text is its value: no escape, no control character, only ASCII.
// Only the extent of the token is checked here, skipping the byte after
// each backslash: Unquote, or encoding/json, checks and decodes the rest.
func (s *Scanner) StringToken() (tok []byte, plain bool, err error) {
	if !s.Consume('"') {
		return nil, false, ErrNotString
	}
	start := s.i - 1
	plain = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start:s.i:s.i], plain, nil
		case c == '\\':
			plain = false
			s.i += 2
			continue
		case c < 0x20 || c >= utf8.RuneSelf:
			plain = false
		}
		s.i++
	}
	return nil, false, ErrUnterminated
}

// NumberToken reads the number token that comes next (RFC 8259 grammar:
// an optional minus, an integer without leading zeros, an optional
// fraction and exponent) and returns it as it stands in the input. false
// means that no valid number comes next; the scanner has then moved.
func (s *Scanner) NumberToken() ([]byte, bool) {
	start := s.i
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	s.Consume('-')
	intStart := s.i
	if digits() == 0 || s.b[intStart] == '0' && s.i-intStart > 1 {
		return nil, false
	}
	if s.Consume('.') && digits() == 0 {
		return nil, false
	}
	if s.Consume('e') || s.Consume('E') {
		if !s.Consume('+') {
			s.Consume('-')
		}
		if digits() == 0 {
			return nil, false
		}
	}
	return s.b[start:s.i:s.i], true
}

// Unquote returns the value of a string token (StringToken's, quotes
// included) by RFC 8259's rules, strictly: false for a control
// character, an unknown escape, a lone or unpaired UTF-16 surrogate, or
// invalid UTF-8, all of which encoding/json would let through as U+FFFD.
func Unquote(tok []byte) (string, bool) {
	if len(tok) < 2 || tok[0] != '"' || tok[len(tok)-1] != '"' {
		return "", false
	}
	b := tok[1 : len(tok)-1]
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		c := b[i]
		switch {
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			i++
			continue
		}
		if i+1 >= len(b) {
			return "", false
		}
		e := b[i+1]
		i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(b, i)
			if !ok {
				return "", false
			}
			i += 4
			if utf16.IsSurrogate(r) {
				// Only a pair is a character.
				if i+6 > len(b) || b[i] != '\\' || b[i+1] != 'u' {
					return "", false
				}
				r2, ok := hex4(b, i+2)
				if !ok {
					return "", false
				}
				i += 6
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return "", false
		}
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}

// hex4 reads the four hex digits of a \u escape at b[i:].
func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(v), true
}

// safe marks the ASCII bytes every style writes as they are.
var safe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// AppendString appends s as a JSON string the way the relay writes its
// own JSON (a CloudEvents structured event): '"' and '\\' escaped,
// control characters as \n, \r, \t or \u00xx (lower-case hex), invalid
// UTF-8 as the escape \ufffd, everything else as it is.
func AppendString(dst []byte, s string) []byte { return appendString(dst, s, false) }

// AppendJacksonString appends s as a JSON string the way Jackson (Kafka
// Connect's JsonConverter) writes it: '"' and '\\' escaped, control
// characters as \b, \t, \n, \f, \r or \u00XX (upper-case hex),
// characters beyond the BMP as their escaped UTF-16 surrogates (\uXXXX,
// upper-case), everything else as it is. Invalid UTF-8 becomes U+FFFD, as
// Java's decoding of the text does.
func AppendJacksonString(dst []byte, s string) []byte { return appendString(dst, s, true) }

// appendString is both writers: they differ only in jackson's cases.
func appendString(dst []byte, s string, jackson bool) []byte {
	const lowerHex, upperHex = "0123456789abcdef", "0123456789ABCDEF"
	hex := lowerHex
	if jackson {
		hex = upperHex
	}
	dst = append(dst, '"')
	start := 0 // s[start:i] is safe and not yet appended
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if safe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c == '\n':
				dst = append(dst, '\\', 'n')
			case c == '\r':
				dst = append(dst, '\\', 'r')
			case c == '\t':
				dst = append(dst, '\\', 't')
			case jackson && c == '\b':
				dst = append(dst, '\\', 'b')
			case jackson && c == '\f':
				dst = append(dst, '\\', 'f')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[start:i]...)
			if jackson {
				dst = append(dst, "\uFFFD"...)
			} else {
				dst = append(dst, `\ufffd`...)
			}
			start = i + size
		case jackson && r > 0xFFFF:
			// Jackson writes a supplementary character as its escaped
			// surrogate pair (COMBINE_UNICODE_SURROGATES_IN_UTF8 is off
			// by default).
			dst = append(dst, s[start:i]...)
			hi, lo := utf16.EncodeRune(r)
			dst = appendU(appendU(dst, hi, hex), lo, hex)
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendU appends the escape \uXXXX of r with the given hex digits.
func appendU(dst []byte, r rune, hex string) []byte {
	return append(dst, '\\', 'u', hex[r>>12&0xF], hex[r>>8&0xF], hex[r>>4&0xF], hex[r&0xF])
}

// Offset is the scanner's position in its input: where the next token
// starts once SkipSpace ran, or where the last one ended.
func (s *Scanner) Offset() int { return s.i }

// SkipValue skips the JSON value that comes next (a string, number,
// literal, object or array, nested at most maxDepth deep), checking its
// grammar but not the contents of its strings. false means that no valid
// value comes next; the scanner has then moved.
func (s *Scanner) SkipValue() bool { return s.skipValue(0) }

// maxDepth bounds SkipValue's nesting: deeper input is refused, not
// recursed into until the stack runs out.
const maxDepth = 1000

func (s *Scanner) skipValue(depth int) bool {
	if depth > maxDepth {
		return false
	}
	s.SkipSpace()
	c, ok := s.Peek()
	if !ok {
		return false
	}
	switch c {
	case '"':
		_, _, err := s.StringToken()
		return err == nil
	case 't':
		return s.ConsumeLiteral("true")
	case 'f':
		return s.ConsumeLiteral("false")
	case 'n':
		return s.ConsumeLiteral("null")
	case '{', '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		s.i++
		s.SkipSpace()
		if s.Consume(closer) {
			return true
		}
		for {
			if c == '{' {
				s.SkipSpace()
				if _, _, err := s.StringToken(); err != nil {
					return false
				}
				s.SkipSpace()
				if !s.Consume(':') {
					return false
				}
			}
			if !s.skipValue(depth + 1) {
				return false
			}
			s.SkipSpace()
			if s.Consume(closer) {
				return true
			}
			if !s.Consume(',') {
				return false
			}
		}
	}
	_, ok = s.NumberToken()
	return ok
}

// Source is the scanner's whole input, for a caller that keeps offsets
// into it (Offset).
func (s *Scanner) Source() []byte { return s.b }

// Seek moves the scanner to offset i of its input: back to a value a
// caller skipped (Offset) to read it now.
func (s *Scanner) Seek(i int) { s.i = i }
