// Package schemareg is the relay's client of a schema registry that speaks
// Confluent's REST API (Confluent Schema Registry, Karapace, Redpanda,
// Apicurio's /apis/ccompat/v7): the lookups an encoder needs (a schema by
// id, a subject's version or its latest), a bounded cache in front of
// them (the wire format itself is record/internal/wire's).
//
// It is built for a relay that must tell a bad event from a bad day: a
// subject, version or id the registry does not have is ErrNotFound (the
// event is poison), a registry that cannot answer is ErrTransient (retry,
// nothing is dead-lettered), and what is cached keeps being served while
// the registry is down. No error text carries a credential.
package schemareg

import "github.com/outbox-relay/outbox-relay/record"

// Config is how the client reaches the registry and how much it
// remembers: record.RegistryConfig, where the relay's configuration
// declares it.
type Config = record.RegistryConfig

// DefaultConfig returns the defaults of every field.
func DefaultConfig() Config { return record.DefaultRegistryConfig() }
