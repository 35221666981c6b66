// Package config is the binary's typed configuration: the flags, declared
// by group as the fields they fill (flags.go), and Config, every command's
// configuration, which they fill and Validate checks. The commands read
// it; the command tree that parses into it is package main's.
package config

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/pgauth"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/outboxdb"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
	"github.com/outbox-relay/outbox-relay/replication"
)

// config is every subcommand's configuration, from flags with
// OUTBOX_RELAY_* environment fallbacks: each flag's to tag says where its
// value goes (envflag.Set.Fill, flags.go). The relay's flags fill Relay,
// and name their field in the errors relay.Config's Validate and the
// libraries report; the rest (logging, --metrics-addr, --pprof,
// --max-procs, tracing, migrate's) are the binary's own.
type Config struct {
	// Relay is the relay's configuration. configure starts it from
	// relay.DefaultConfig, so a field without a flag in the command keeps
	// its default. Parsed, it holds the flags' values as given; validate
	// then passes each flag's 0 on as -1 (explicitZeros) and adds Kafka's
	// brokers, TLS and SASL, built from KafkaBrokers and KafkaConn.
	Relay relay.Config
	// KafkaBrokers is --kafka-brokers, comma-separated: Relay.Kafka.Brokers.
	KafkaBrokers string
	// KafkaConn is the Kafka TLS and SASL the flags describe (files,
	// names, credentials); validate builds Relay.Kafka.TLS and SASL from
	// it.
	KafkaConn kafkaconn.Config
	// RegistryTLS is the schema registry's TLS files; validate builds
	// Relay.Publish.Record.Registry.TLS from it.
	RegistryTLS kafkaconn.TLSConfig
	// PGAuth is how to authenticate to PostgreSQL beyond the URL's
	// password; validate sets Relay.Database.BeforeConnect from it.
	PGAuth pgauth.Options

	MetricsAddr, LogLevel, LogFormat string
	PProf                            bool
	PProfAddr                        string
	// MaxProcs is the GOMAXPROCS the streaming commands set (0: the Go
	// runtime's own choice); see procs.go.
	MaxProcs int
	// Trace is the optional publish span and its exporter (tracing.go).
	Trace Trace
	// migrate's: the least-privilege role it grants, and the payload
	// column of a table it creates (NullablePayload: without NOT NULL).
	GrantRole, PayloadType        string
	GrantCleanup, NullablePayload bool
	// FailoverSlotSet records that --failover-slot (the negation of
	// Relay.Database.NoFailoverSlot) was given, on the command line or in
	// the environment: only then does migrate change an existing slot's
	// flag.
	FailoverSlotSet bool

	// FlagText names configuration fields by the flags that set them, in
	// library text (flagtext.go); set once the flags are parsed.
	FlagText func(string) string
	// FieldFlags lists the configuration fields a library text names,
	// with their flags, for the logs' "flags" attribute; set with
	// FlagText.
	FieldFlags func(string) map[string]string

	// secretFiles are the files Secrets were read from (<ENV>_FILE, the
	// password and token files), for warnInsecure's permission check.
	secretFiles []string

	// Derived by Validate: see the accessors below.
	kafkaSecurity kafkaconn.Security
	table         migrations.Table
	template      publisher.TopicTemplate
	level         zerolog.Level
}

// Table is the outbox table, parsed by Validate.
func (c *Config) Table() migrations.Table { return c.table }

// Template is the topic template, parsed by Validate.
func (c *Config) Template() publisher.TopicTemplate { return c.template }

// Level is the log level, parsed by Validate.
func (c *Config) Level() zerolog.Level { return c.level }

// KafkaSecurity is the TLS and SASL of every Kafka connection, built by
// Validate.
func (c *Config) KafkaSecurity() kafkaconn.Security { return c.kafkaSecurity }

// ReplOpts are the replication connections' options: the credentials
// hook of --database-password-file or --database-auth.
func (c *Config) ReplOpts() []replication.Option {
	return []replication.Option{replication.WithBeforeConnect(c.Relay.Database.BeforeConnect)} // nil: none
}

// kafkaConnPrefix prefixes the field paths of config.KafkaConn, which
// kafkaconn's errors name without it ("TLS.CAFile").
const kafkaConnPrefix = "kafkaconn."

// Scope selects which flags of a command Validate checks: those of the
// groups it embeds (ScopeOf).
type Scope int

const (
	ScopeDB      Scope = 1 << iota // DBFlags: database, slot, publication, table
	ScopeKafka                     // KafkaFlags: brokers, topics, batching
	ScopeRun                       // RunFlags: run-only knobs
	ScopeMigrate                   // MigrateFlags: migrate-only knobs
)

// ScopeOf is the scope of command options of type t (a struct): the
// groups it embeds, directly or through another embedded struct, say which
// flags it takes, so the scope is never declared twice.
func ScopeOf(t reflect.Type) Scope {
	var s Scope
	for g, bit := range map[reflect.Type]Scope{
		reflect.TypeFor[DBFlags](): ScopeDB, reflect.TypeFor[KafkaFlags](): ScopeKafka,
		reflect.TypeFor[RunFlags](): ScopeRun, reflect.TypeFor[MigrateFlags](): ScopeMigrate,
	} {
		if f, ok := t.FieldByName(g.Name()); ok && f.Anonymous && f.Type == g {
			s |= bit
		}
	}
	return s
}

// explicitZeros passes a flag's 0 on to relay.Config as -1, generically:
// every numeric field of c whose default (relay.DefaultConfig) is not 0.
// In relay.Config a zero field means its default, while on the command
// line every flag shows its default and a 0 is the user's: it turns the
// knob off (-1 is relay.Config's "off"; a negative flag value is refused
// as it is parsed: envflag) or is refused by
// Validate, and flagError then shows the 0 the user gave. A field without
// a flag in the command holds its default (bind starts from
// DefaultConfig), never 0.
func explicitZeros(c *relay.Config) { envflag.ExplicitZeros(c, relay.DefaultConfig()) }

// failoverSlot reports whether the slot a command creates is a failover
// slot (--failover-slot).
func (c *Config) FailoverSlot() bool { return !c.Relay.Database.NoFailoverSlot }

// Validate checks the configuration of scope s and derives typed values:
// the relay's fields through relay.Config.Validate, the binary's own here.
// Each error names its flag and says how to fix it.
func (c *Config) Validate(set *envflag.Set, s Scope) error {
	errs := set.EnvErrs()
	c.secretFiles = slices.Clone(set.SecretFiles())
	for _, f := range []string{c.PGAuth.PasswordFile, c.KafkaConn.SASL.OAuth.TokenFile} {
		if f != "" {
			c.secretFiles = append(c.secretFiles, f)
		}
	}
	c.FailoverSlotSet = set.IsSet("failover-slot")
	// Only the levels the relay logs at: disabled, panic or fatal would
	// silence every warning, the insecure-setting ones included.
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel))
	if err != nil || lvl < zerolog.DebugLevel || lvl > zerolog.ErrorLevel {
		errs = append(errs, fmt.Errorf("--log-level %q: use debug, info, warn or error", c.LogLevel))
	}
	c.level = lvl
	if c.LogFormat != "json" && c.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("--log-format %q: use json or console", c.LogFormat))
	}
	k := &c.Relay.Kafka
	k.Brokers = nil
	for _, br := range strings.Split(c.KafkaBrokers, ",") {
		if br = strings.TrimSpace(br); br != "" {
			k.Brokers = append(k.Brokers, br)
		}
	}
	if s&ScopeKafka != 0 {
		// Loaded now, so a missing file or a certificate without its key
		// is a configuration error (exit 2).
		sec, err := c.KafkaConn.Build()
		errs = append(errs, kafkaFlagErrors(set, err)...)
		c.kafkaSecurity = sec
		k.TLS, k.SASL = sec.TLS, sec.SASL
	}
	if s&ScopeKafka != 0 && c.RegistryTLS.On() {
		sec, err := kafkaconn.Config{TLS: c.RegistryTLS}.Build()
		errs = append(errs, settingFlagErrors(set, "Registry", err)...)
		c.Relay.Publish.Record.Registry.TLS = sec.TLS
	}
	if s&ScopeDB != 0 {
		hook, err := c.PGAuth.Build(context.Background(), c.Relay.Database.URL)
		if err != nil {
			errs = append(errs, err)
		}
		c.Relay.Database.BeforeConnect = hook
	}
	errs = append(errs, c.conflicts(set, s)...)
	// Validated with the flags' 0s passed on as -1; the errors show the
	// flags' values, as given (flagError).
	rc := c.Relay
	explicitZeros(&rc)
	for _, e := range unjoin(rc.Validate()) {
		var fe *relay.FieldError
		if !errors.As(e, &fe) {
			errs = append(errs, e)
		} else if fe := flagError(set, fe, c.Text); fe != nil {
			errs = append(errs, fe)
		}
	}
	c.Relay = rc
	c.table, _ = migrations.ParseTable(c.Relay.Database.Table)
	c.template, _ = publisher.ParseTopicTemplate(c.Relay.Publish.TopicTemplate)
	if s&ScopeMigrate != 0 {
		errs = append(errs, c.validateMigrate()...)
	}
	if s&ScopeRun != 0 {
		if c.MetricsAddr != "" {
			if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
				errs = append(errs, fmt.Errorf("--metrics-addr %q is not host:port (empty disables metrics)", c.MetricsAddr))
			}
		}
		if c.MaxProcs < 0 || c.MaxProcs > MaxProcsLimit {
			errs = append(errs, fmt.Errorf("--max-procs %d: use 1 (the default), a larger count up to %d, or 0 for the Go runtime's choice", c.MaxProcs, MaxProcsLimit))
		}
		errs = append(errs, c.Trace.validate()...)
	}
	return errors.Join(errs...)
}

// conflicts are flags that are valid alone but not with the others: a
// setting that would be ignored is refused rather than silently dropped.
func (c *Config) conflicts(set *envflag.Set, s Scope) []error {
	var errs []error
	p := c.Relay.Publish
	if p.Delivery != relay.ExactlyOnce {
		for _, f := range []struct{ name, value string }{{"transaction-interval", p.TransactionInterval.String()},
			{"transaction-timeout", p.TransactionTimeout.String()}, {"transactional-id", p.TransactionalID}} {
			if set.IsSet(f.name) {
				errs = append(errs, fmt.Errorf("--%s %s is only used with --delivery exactly-once (--delivery is %s): drop it, or set --delivery exactly-once", f.name, f.value, p.Delivery))
			}
		}
	}
	if f, _ := record.ParseFormat(string(p.Record.Format)); !f.Registry() {
		// The relay refuses the URL, the strategy and the version itself.
		for _, fl := range set.Flags() {
			if !strings.HasPrefix(fl.Name, "schema-registry-") || fl.Name == "schema-registry-url" || !set.IsSet(fl.Name) {
				continue
			}
			v := ""
			if !fl.Tag.Has("secret") {
				v = " " + envflag.Format(fl, fl.Target)
			}
			errs = append(errs, fmt.Errorf("--%s%s is only used with a registry format (--record-format avro, protobuf or json-schema; it is %s)", fl.Name, v, f))
		}
	}
	if set.IsSet("topic-replication-factor") && p.TopicReplicationFactor == 0 {
		errs = append(errs, errors.New("--topic-replication-factor 0: use -1 (the brokers' default) or a count of replicas, e.g. 3"))
	}
	if s&ScopeRun != 0 && c.PProf {
		// Profiles and goroutine stacks describe the process from the
		// inside: never on the probe port, which the chart exposes.
		if host, _, err := net.SplitHostPort(c.PProfAddr); err != nil || !allLoopback(host) || host == "" {
			errs = append(errs, fmt.Errorf("--pprof-addr %q: use a loopback host:port such as 127.0.0.1:6060 (profiles are never served beyond this machine)", c.PProfAddr))
		}
	}
	return errs
}

// MaxProcsLimit bounds --max-procs: every P can hold an OS thread, and a
// count in the tens of thousands ends the process with "thread
// exhaustion" and a stack trace of a million lines. No machine the relay
// runs on has more cores than this.
const MaxProcsLimit = 1024

func (c *Config) validateMigrate() []error {
	var errs []error
	if c.GrantCleanup && c.GrantRole == "" {
		errs = append(errs, errors.New("--grant-cleanup needs --grant-role NAME (the role to grant DELETE on the outbox to)"))
	}
	if c.GrantRole != "" && !outboxdb.ValidName(c.GrantRole) {
		errs = append(errs, fmt.Errorf("--grant-role %q: use 1-63 lower-case letters, digits and underscores, e.g. outbox_relay", c.GrantRole))
	}
	if c.PayloadType != migrations.PayloadJSONB && c.PayloadType != migrations.PayloadBytea {
		errs = append(errs, fmt.Errorf("--payload-type %q: use jsonb or bytea", c.PayloadType))
	}
	return errs
}

// unjoin lists the errors err joins (none for nil).
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	if err == nil {
		return nil
	}
	return []error{err}
}

// EnvPrefix prefixes the environment fallback of every flag.
const EnvPrefix = "OUTBOX_RELAY_"

// flagError prints a relay.FieldError in the terms of this command's
// flags; nil for a field the command has no flag for (it keeps its
// default). text names the other fields it mentions.
//
// The value shown is the flag's, as the user gave it: validate passes a
// flag's 0 on as -1 (explicitZeros; zero means "the default" in
// relay.Config), so the value Validate rejected is not always the one the
// user typed.
func flagError(set *envflag.Set, fe *relay.FieldError, text func(string) string) error {
	detail := strings.TrimPrefix(fe.Error(), fe.Field)
	if v, ok := set.Value(fe.Field); ok && fe.Value != nil {
		if _, str := fe.Value.(string); str {
			v = strconv.Quote(v)
		}
		detail = " " + v + ": " + fe.Err.Error()
	}
	return set.FieldError(fe.Field, errors.Is(fe.Err, relay.ErrRequired), detail, text)
}
