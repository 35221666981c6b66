package envflag

import (
	"fmt"
	"strings"
)

// ValueError is a malformed flag value, from the command line (Source
// "--max-inflight-bytes ") or the environment (Source
// "OUTBOX_RELAY_MAX_INFLIGHT_BYTES="): both read the same after the
// value, so the fix is the same wherever the value was set.
type ValueError struct {
	Source, Value string
	Err           error
	// Secret hides Value: a malformed secret is refused before it is
	// registered for redaction.
	Secret bool
}

// maxShown is the most of a refused value an error quotes.
const maxShown = 64

func (e *ValueError) Error() string {
	switch {
	case e.Secret:
		return fmt.Sprintf("%s(value hidden): %v", e.Source, e.Err)
	case len(e.Value) > maxShown:
		return fmt.Sprintf("%s%q… (%d bytes): %v", e.Source, strings.ToValidUTF8(e.Value[:maxShown], ""), len(e.Value), e.Err)
	}
	return fmt.Sprintf("%s%q: %v", e.Source, e.Value, e.Err)
}
func (e *ValueError) Unwrap() error { return e.Err }
