package record

import (
	"errors"

	"github.com/outbox-relay/outbox-relay/record/internal/avrojson"
	"github.com/outbox-relay/outbox-relay/record/internal/jsoncheck"
	"github.com/outbox-relay/outbox-relay/record/internal/pbjson"
)

// PayloadField reads an error of Schema.AppendValue: ok reports whether
// it is a payload the schema refuses (not a Schema that did not come from
// ParseSchema), and field names the first offending value the way its
// format's checker finds it: "items[2].price" for Avro and Protobuf
// (`attrs["k"]` for a Protobuf map's value), "items/2/price" for JSON
// Schema. field is "" when the error is about the whole payload, and for
// a Protobuf message read by protojson (one reaching a well-known type,
// a group, an extension or a required field), whose account names the
// member only in the error's text. The producer-side check
// (outboxschema.SchemaError.Field) reports it without the caller parsing
// error text.
func PayloadField(err error) (field string, ok bool) {
	var ae *avrojson.Error
	var je *jsoncheck.Error
	var pe *pbjson.Error
	switch {
	case errors.As(err, &ae):
		return ae.Path, true
	case errors.As(err, &je):
		return je.Path, true
	case errors.As(err, &pe):
		return pe.Field, true
	}
	return "", false
}
