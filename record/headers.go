package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/jsontext"
)

// Header names of the outbox columns: FormatNative sets all five, in this
// order, before the row's own headers; FormatDebezium sets the four
// after its event id header (HeaderDebeziumID), in another order.
const (
	// HeaderEventID is the event_id column (a UUID), in FormatNative.
	HeaderEventID = "event_id"
	// HeaderEventType is the event_type column.
	HeaderEventType = "event_type"
	// HeaderSchemaVersion is the schema_version column, as PostgreSQL
	// renders it.
	HeaderSchemaVersion = "schema_version"
	// HeaderAggregateType is the aggregate_type column.
	HeaderAggregateType = "aggregate_type"
	// HeaderAggregateVersion is the aggregate_version column, as
	// PostgreSQL renders it.
	HeaderAggregateVersion = "aggregate_version"
)

// bytesOf returns s's bytes without copying. The event's strings share one
// immutable buffer per event (Row), and kafka-go only reads
// message bytes, so aliasing saves an allocation per header per event.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// parseHeaders reads a JSON object of string values, keeping key order.
func parseHeaders(raw []byte) ([]kafka.Header, error) {
	return appendHeaders(nil, raw)
}

// appendHeaders appends the members of raw, a JSON object of string
// values, to out. Plain ASCII strings (the common case) alias raw instead
// of being copied; strings with escapes or other bytes are decoded
// strictly (headerString). raw must not change afterwards (an event's
// buffer doesn't).
func appendHeaders(out []kafka.Header, raw []byte) ([]kafka.Header, error) {
	p := jsontext.NewScanner(raw)
	p.SkipSpace()
	if p.ConsumeLiteral("null") {
		return endHeaders(p, out)
	}
	if !p.Consume('{') {
		return nil, errors.New("not a JSON object")
	}
	p.SkipSpace()
	if p.Consume('}') {
		return endHeaders(p, out)
	}
	for n := 1; ; n++ {
		p.SkipSpace()
		key, err := headerString(p)
		if err != nil {
			if u, ok := err.(*InvalidUTF8Error); ok {
				// Named by position: the name itself is not text.
				u.Field = "the name of row header " + strconv.Itoa(n)
				return nil, u
			}
			return nil, fmt.Errorf("header name: %w", err)
		}
		if len(key) == 0 {
			return nil, errors.New("empty header name")
		}
		p.SkipSpace()
		if !p.Consume(':') {
			return nil, errors.New("malformed JSON object")
		}
		p.SkipSpace()
		if c, ok := p.Peek(); ok && c != '"' {
			return nil, fmt.Errorf("value of %q is not a string", key)
		}
		val, err := headerString(p)
		if err != nil {
			if u, ok := err.(*InvalidUTF8Error); ok {
				u.Field = fmt.Sprintf("the value of row header %q", key)
				return nil, u
			}
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		out = append(out, kafka.Header{Key: unsafe.String(unsafe.SliceData(key), len(key)), Value: val})
		p.SkipSpace()
		if p.Consume(',') {
			continue
		}
		if p.Consume('}') {
			return endHeaders(p, out)
		}
		return nil, errors.New("malformed JSON object")
	}
}

// headerString reads a JSON string: a plain one aliases the input, any
// other is decoded strictly (jsontext.Unquote): a header name or value is
// text on the wire, and encoding/json would quietly change it (invalid
// UTF-8 and lone surrogate escapes become U+FFFD). A string that is not
// valid UTF-8 is an *InvalidUTF8Error at the offset of its first invalid
// byte in the decoded value, its Field left for the caller to name; a lone
// surrogate is errLoneSurrogate; other faults are encoding/json's errors.
func headerString(p *jsontext.Scanner) ([]byte, error) {
	tok, plain, err := p.StringToken()
	if err != nil {
		return nil, err
	}
	if plain {
		return tok[1 : len(tok)-1 : len(tok)-1], nil
	}
	if s, ok := jsontext.Unquote(tok); ok {
		// s is new and never written to: the header may alias it.
		return bytesOf(s), nil
	}
	// Say why: malformed JSON first, as encoding/json reports it; then
	// the first of an invalid byte and a lone surrogate.
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, err
	}
	if i := invalidUTF8AtBytes(tok); i >= 0 {
		// Escapes are ASCII, so the token splits at the invalid byte:
		// the offset is the decoded length of what comes before it.
		if before, ok := jsontext.Unquote(append(tok[:i:i], '"')); ok {
			return nil, &InvalidUTF8Error{Offset: len(before)}
		}
	}
	return nil, errLoneSurrogate
}

// endHeaders checks that nothing but white space follows the headers.
func endHeaders(p *jsontext.Scanner, out []kafka.Header) ([]kafka.Header, error) {
	p.SkipSpace()
	if !p.AtEnd() {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}
