package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"unsafe"

	"github.com/segmentio/kafka-go"
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
// immutable buffer per event (replication.Event), and kafka-go only reads
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
// of being copied; strings with escapes or other bytes go through
// encoding/json. raw must not change afterwards (an event's buffer doesn't).
func appendHeaders(out []kafka.Header, raw []byte) ([]kafka.Header, error) {
	p := headerParser{b: raw}
	p.ws()
	if p.literal("null") {
		return p.end(out)
	}
	if !p.next('{') {
		return nil, errors.New("not a JSON object")
	}
	p.ws()
	if p.next('}') {
		return p.end(out)
	}
	for {
		p.ws()
		key, err := p.str()
		if err != nil {
			return nil, fmt.Errorf("header name: %w", err)
		}
		if len(key) == 0 {
			return nil, errors.New("empty header name")
		}
		p.ws()
		if !p.next(':') {
			return nil, errors.New("malformed JSON object")
		}
		p.ws()
		if p.i < len(p.b) && p.b[p.i] != '"' {
			return nil, fmt.Errorf("value of %q is not a string", key)
		}
		val, err := p.str()
		if err != nil {
			return nil, fmt.Errorf("value of %q: %w", key, err)
		}
		out = append(out, kafka.Header{Key: unsafe.String(unsafe.SliceData(key), len(key)), Value: val})
		p.ws()
		if p.next(',') {
			continue
		}
		if p.next('}') {
			return p.end(out)
		}
		return nil, errors.New("malformed JSON object")
	}
}

// headerParser is a minimal JSON scanner for a flat object of strings.
type headerParser struct {
	b []byte
	i int
}

func (p *headerParser) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *headerParser) next(c byte) bool {
	if p.i < len(p.b) && p.b[p.i] == c {
		p.i++
		return true
	}
	return false
}

func (p *headerParser) literal(s string) bool {
	if len(p.b)-p.i >= len(s) && string(p.b[p.i:p.i+len(s)]) == s {
		p.i += len(s)
		return true
	}
	return false
}

// str reads a JSON string token.
func (p *headerParser) str() ([]byte, error) {
	if !p.next('"') {
		return nil, errors.New("expected a JSON string")
	}
	start := p.i
	plain := true
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			tok := p.b[start:p.i]
			p.i++
			if plain {
				return tok[:len(tok):len(tok)], nil
			}
			var s string
			if err := json.Unmarshal(p.b[start-1:p.i], &s); err != nil {
				return nil, err
			}
			return []byte(s), nil
		case c == '\\':
			plain = false
			p.i += 2
			continue
		case c < 0x20 || c >= 0x80:
			plain = false
		}
		p.i++
	}
	return nil, errors.New("unterminated JSON string")
}

func (p *headerParser) end(out []kafka.Header) ([]kafka.Header, error) {
	p.ws()
	if p.i != len(p.b) {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}
