// Package fielderr is the one shape of a configuration error in every
// public package: a field's Go path, the rejected value and what to do.
// relay, inbox and outbox export it under the same name (FieldError, an
// alias: one type), so a caller handles the errors of every Validate with
// one errors.As, and the binary names each field by its flag.
package fielderr

import (
	"errors"
	"fmt"
)

// ErrRequired is the Err of an Error for a required field left empty.
var ErrRequired = errors.New("is required")

// Error is one invalid Config field. Validate joins them (errors.Join),
// so a caller can list every problem at once and name each in its own
// terms.
type Error struct {
	// Field is the field's Go path, e.g. "Publish.MaxBatch", or a group's
	// name ("Leader") for a rule over several of its fields.
	Field string
	// Value is the rejected value; nil when it is beside the point (or
	// secret, like a URL with a password).
	Value any
	// Err says what is wrong and how to fix it. It may name other fields
	// by their Go path.
	Err error
}

// Error formats e as "Field Value: Err" (strings quoted), or "Field: Err"
// without a Value.
func (e *Error) Error() string {
	if e.Value == nil {
		return e.Field + ": " + e.Err.Error()
	}
	if s, ok := e.Value.(string); ok {
		return fmt.Sprintf("%s %q: %v", e.Field, s, e.Err)
	}
	return fmt.Sprintf("%s %v: %v", e.Field, e.Value, e.Err)
}

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// List collects the Errors of one Validate.
type List []error

// Fail adds the Error of field holding value; format and args say what is
// wrong and how to fix it.
func (l *List) Fail(field string, value any, format string, args ...any) {
	*l = append(*l, &Error{Field: field, Value: value, Err: fmt.Errorf(format, args...)})
}

// Wrap adds err as the Error of field.
func (l *List) Wrap(field string, err error) {
	*l = append(*l, &Error{Field: field, Err: err})
}

// Nested adds the errors of a nested configuration's Validate (err, one
// error or several joined) under prefix: each *Error's Field becomes
// prefix.Field, and any other error is the Error of prefix itself. A
// configuration that embeds another's (the relay's and the inbox's
// registry settings) then names its fields by their whole path.
func (l *List) Nested(prefix string, err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var fe *Error
		switch {
		case e == nil:
		case errors.As(e, &fe):
			*l = append(*l, &Error{Field: prefix + "." + fe.Field, Value: fe.Value, Err: fe.Err})
		default:
			l.Wrap(prefix, e)
		}
	}
}

// Err joins the list (nil when empty).
func (l List) Err() error { return errors.Join(l...) }
