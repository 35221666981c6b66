package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/relay"
)

// envPrefix prefixes the environment fallback of every flag.
const envPrefix = "OUTBOX_RELAY_"

// flagError prints a relay.FieldError in the terms of this command's
// flags; nil for a field the command has no flag for (it keeps its
// default).
//
// The value shown is the flag's, as the user gave it: validate passes a
// flag's 0 on as -1 (explicitZeros; zero means "the default" in
// relay.Config), so the value Validate rejected is not always the one the
// user typed.
func flagError(b *envflag.Binder, fe *relay.FieldError) error {
	detail := strings.TrimPrefix(fe.Error(), fe.Field)
	if v, ok := b.FieldValue(fe.Field); ok && fe.Value != nil {
		if _, str := fe.Value.(string); str {
			v = strconv.Quote(v)
		}
		detail = " " + v + ": " + fe.Err.Error()
	}
	return b.FieldError(fe.Field, errors.Is(fe.Err, relay.ErrRequired), detail)
}
