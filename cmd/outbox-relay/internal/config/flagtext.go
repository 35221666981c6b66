package config

import (
	"maps"
	"strings"

	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// The libraries name what their user can change by its Go field path in
// relay.Config ("record of 2000000 bytes exceeds Publish.MaxBatchBytes"):
// an embedder has no flags. The binary's user has nothing but flags, so
// wherever the binary answers in its own words - a configuration error,
// the line a failed command ends with, dead-letter reasons and doctor's
// findings - it names the flags instead, through FlagText. Its log records
// keep the libraries' text and carry the fields it names, with their
// flags, as an attribute (FieldFlags, cmd/outbox-relay/internal/flagtext).
// /metrics and /readyz are served as the relay writes them.
//
// The table from field paths to flags comes from the flags' tags (to and
// field, flags.go: envflag.Field), plus kafkaSecurityFields for what the
// messages name inside Kafka.TLS and Kafka.SASL, which the binary builds
// from several flags.

// kafkaSecurityFields map what library messages name inside relay.Config's
// Kafka.TLS (a *tls.Config: its fields' own Go paths) and Kafka.SASL (a
// sasl.Mechanism: what it is built from) to the fields of config.KafkaConn
// (kafkaconn.Config) whose flags build them.
var kafkaSecurityFields = map[string][]string{
	"Kafka.TLS":                     {"TLS.Enabled"},
	"Kafka.TLS.RootCAs":             {"TLS.CAFile"},
	"Kafka.TLS.Certificates":        {"TLS.CertFile", "TLS.KeyFile"},
	"Kafka.TLS.ServerName":          {"TLS.ServerName"},
	"Kafka.TLS.InsecureSkipVerify":  {"TLS.InsecureSkipVerify"},
	"Kafka.SASL":                    {"SASL.Mechanism", "SASL.Username", "SASL.Password"},
	"Kafka.SASL.Mechanism":          {"SASL.Mechanism"},
	"Kafka.SASL.Username":           {"SASL.Username"},
	"Kafka.SASL.Password":           {"SASL.Password"},
	"Kafka.SASL.OAuth.ClientID":     {"SASL.OAuth.ClientID"},
	"Kafka.SASL.OAuth.ClientSecret": {"SASL.OAuth.ClientSecret"},
	"Kafka.SASL.OAuth.Scope":        {"SASL.OAuth.Scope"},
}

// FlagNames is the table from field paths to the flags that set them, for
// a command whose flags set holds: its own (the relay's fields, and the
// options of its own flags such as cleanup's Options.OlderThan), those of
// the relay's fields it lacks from run's flags, run (cleanup names
// Checkpoints.Interval, migrate Cleanup.OlderThan: run's settings; see
// envflag.Names), and kafkaSecurityFields.
func FlagNames(set *envflag.Set, run map[string]string) map[string]string { // set nil: run's names only
	names := maps.Clone(run)
	if set != nil {
		maps.Copy(names, set.Names())
	}
	for field, conn := range kafkaSecurityFields {
		var flags []string
		for _, f := range conn {
			if name, ok := names[kafkaConnPrefix+f]; ok {
				flags = append(flags, name)
			}
		}
		if len(flags) == len(conn) {
			names[field] = andList(flags)
		}
	}
	return names
}

// andList joins "a", "b" and "c" as "a, b and c".
func andList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

// text is c.FlagText, or nothing to translate before the flags are
// parsed.
func (c *Config) Text(s string) string {
	if c == nil || c.FlagText == nil {
		return s
	}
	return c.FlagText(s)
}

// Flags are the configuration fields s names, with their flags
// (FieldFlags; none before the flags are parsed).
func (c *Config) Flags(s string) map[string]string {
	if c == nil || c.FieldFlags == nil {
		return nil
	}
	return c.FieldFlags(s)
}
