package main

import (
	"errors"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/relay"
)

// envPrefix prefixes the environment fallback of every flag.
const envPrefix = "OUTBOX_RELAY_"

// flagError prints a relay.FieldError in the terms of this command's
// flags; nil for a field the command has no flag for (it keeps its
// default).
func flagError(b *envflag.Binder, fe *relay.FieldError) error {
	return b.FieldError(fe.Field, errors.Is(fe.Err, relay.ErrRequired), strings.TrimPrefix(fe.Error(), fe.Field))
}
