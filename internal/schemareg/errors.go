package schemareg

import (
	"errors"
	"fmt"
	"strings"
)

// The classes of a failed lookup, for errors.Is. Every error of a lookup
// is an *Error and is exactly one of ErrNotFound, ErrInvalid and
// ErrTransient (ErrUnauthorized is also ErrTransient).
var (
	// ErrNotFound: the registry answered that the subject, the version or
	// the schema id is not registered. For the relay the event is poison
	// until someone registers it (then a retry delivers).
	ErrNotFound = errors.New("not registered")
	// ErrInvalid: the lookup can never succeed as asked: a version below 1
	// (other than Latest), an empty subject, a request the registry
	// refused as malformed (4xx other than 401, 403, 404, 408, 429), or a
	// schema of a type this client does not know.
	ErrInvalid = errors.New("invalid lookup")
	// ErrTransient: the registry could not answer: no connection, a
	// timeout, a 5xx, 408 or 429, a response that is not the Confluent
	// API's (a 404 without a Confluent error code is a wrong URL, not a
	// missing schema), or refused credentials. Retry with backoff.
	ErrTransient = errors.New("registry unavailable")
	// ErrUnauthorized: the registry refused the credentials (401, 403).
	// It is also ErrTransient: the events are fine, the configuration (or
	// a rotated secret) is not.
	ErrUnauthorized = errors.New("credentials refused")
)

// Error is a failed lookup: what was looked up, the registry's answer
// when there was one, and the class (Kind) as the error it wraps.
type Error struct {
	// Lookup names what was asked, e.g. `schema id 7` or
	// `subject "orders-value" version latest`.
	Lookup string
	// Status is the HTTP status, 0 when no response came.
	Status int
	// Code is the Confluent error_code of the response (40401 subject,
	// 40402 version, 40403 schema not found, …), 0 when none.
	Code int
	// Message is the registry's message, shortened, with any credential
	// of the client's configuration masked.
	Message string
	// Kind is ErrNotFound, ErrInvalid or ErrTransient (or
	// ErrUnauthorized).
	Kind error
	// Err is the cause below the response (a network error, a context's
	// error, a decoding error), nil when the response says it all.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schema registry: %s: %v", e.Lookup, e.Kind)
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d", e.Status)
		if e.Code != 0 {
			fmt.Fprintf(&b, ", error_code %d", e.Code)
		}
		b.WriteString(")")
	}
	if e.Message != "" {
		fmt.Fprintf(&b, ": %s", e.Message)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

// Unwrap gives the class and the cause, so errors.Is matches both
// (ErrTransient and context.DeadlineExceeded, say).
func (e *Error) Unwrap() []error {
	out := []error{e.Kind}
	if e.Kind == ErrUnauthorized {
		out = append(out, ErrTransient)
	}
	if e.Err != nil {
		out = append(out, e.Err)
	}
	return out
}

// masker hides the configured secrets in text that came from elsewhere
// (a registry's message, a transport error): a misbehaving proxy may echo
// an Authorization header.
type masker []string

func newMasker(secrets ...string) masker {
	var m masker
	for _, s := range secrets {
		if len(s) >= 3 { // shorter ones would mask random text, and are no secret
			m = append(m, s)
		}
	}
	return m
}

func (m masker) mask(s string) string {
	for _, secret := range m {
		s = strings.ReplaceAll(s, secret, "***")
	}
	return s
}

// maskedError is an error whose text is masked; errors.Is and errors.As
// still reach the original.
type maskedError struct {
	text string
	err  error
}

func (e *maskedError) Error() string { return e.text }
func (e *maskedError) Unwrap() error { return e.err }

func (m masker) wrap(err error) error {
	if err == nil {
		return nil
	}
	if t := m.mask(err.Error()); t != err.Error() {
		return &maskedError{text: t, err: err}
	}
	return err
}
