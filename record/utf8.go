package record

import (
	"errors"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// InvalidUTF8Error is a field that a record carries as text (the key, a
// header name or value, a JSON string) but that is not valid UTF-8, as a
// SQL_ASCII database or a bytea-to-text cast can store it
// (docs/formats.md#invalid-utf-8). Rather than replace the bytes with
// U+FFFD, or hand Kafka text its Java consumers would decode as U+FFFD,
// Encode refuses the event: the *EncodeError (CodeInvalidRow, or
// CodeInvalidHeaders for the headers column) wraps an *InvalidUTF8Error,
// and the relay dead-letters the event.
//
// The error names the field and the offset of its first invalid byte,
// never the field's content: its text goes to logs and to the dead
// letter's reason.
type InvalidUTF8Error struct {
	// Field names the field: a column (aggregate_id, payload, ...), or a
	// row header ("the value of row header \"tenant\"", "the name of row
	// header 2", counting the headers column's members from 1).
	Field string
	// Offset is the offset of the first invalid byte in the field's
	// value, counting from 0 (for a row header, in its value after JSON
	// unescaping).
	Offset int
}

// Error says which field is not UTF-8, and where.
func (e *InvalidUTF8Error) Error() string {
	return "invalid UTF-8 in " + e.Field + " at byte offset " + strconv.Itoa(e.Offset)
}

// invalidUTF8At returns the offset of the first byte of s that does not
// begin a valid UTF-8 sequence, or -1 when s is valid UTF-8.
func invalidUTF8At(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return -1 // not reached: ValidString said otherwise
}

// invalidUTF8AtBytes is invalidUTF8At of b, without copying it.
func invalidUTF8AtBytes(b []byte) int {
	return invalidUTF8At(unsafe.String(unsafe.SliceData(b), len(b)))
}

// checkUTF8 refuses an event whose text columns are not valid UTF-8:
// every format writes each of them as text (the key, header values, JSON
// strings), and none may change them. The columns are checked in the
// order of the outbox table.
func checkUTF8(ev *Row) *InvalidUTF8Error {
	for _, c := range [...]struct{ name, v string }{
		{"event_id", ev.EventID},
		{"aggregate_type", ev.AggregateType},
		{"aggregate_id", ev.AggregateID},
		{"aggregate_version", ev.AggregateVersion},
		{"event_type", ev.EventType},
		{"schema_version", ev.SchemaVersion},
	} {
		if i := invalidUTF8At(c.v); i >= 0 {
			return &InvalidUTF8Error{Field: c.name, Offset: i}
		}
	}
	return nil
}

// errLoneSurrogate is a JSON string with a \u escape of a lone UTF-16
// surrogate: it has no UTF-8 form, and encoding/json would make it U+FFFD.
var errLoneSurrogate = errors.New(`a \u escape is a lone UTF-16 surrogate, which is not a character`)
