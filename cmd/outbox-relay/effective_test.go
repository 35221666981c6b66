package main

import (
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/pgauth"
	"github.com/outbox-relay/outbox-relay/internal/kafkaclients"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/record"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Every command says what it hands to the libraries it runs (test code:
// nothing in the binary reads it, only TestEveryFlagHonouredOrRefused): its
// effective configuration (effective), built from the parsed flags the
// way its run builds them. TestEveryFlagHonouredOrRefused sets each flag
// a command accepts to another valid value and wants this configuration
// to change, or the command to refuse the flag: a flag a command takes
// and ignores is a defect (issue 47: replay took --positions-topic and
// --idempotent and published without the forgery guard and the
// idempotent producer).
type configured interface {
	effective(x *invocation) any
}

// The parts several commands share.
type (
	// logInput is every command's logger (newLogger).
	logInput struct{ Level, Format string }
	// dbInput is the PostgreSQL connection (connectPool, the
	// replication connections) and what it reads.
	dbInput struct {
		URL, ReplicationURL string
		Auth                pgauth.Options
		Table               string
		Slot, Publication   string
	}
	// kafkaInput is the Kafka connection every client is built from,
	// as the flags describe it (kafkaconn builds TLS and SASL from
	// Conn).
	kafkaInput struct {
		Brokers                      []string
		Conn                         kafkaconn.Config
		MetadataTTL, SessionLifetime time.Duration
	}
)

func logOf(c *config.Config) logInput { return logInput{c.LogLevel, c.LogFormat} }

// dbOf is the connection, and the parts of the outbox the command reads,
// by letter: t the table, s the slot, p the publication, r the standby
// the slot lives on (--replication-url).
func dbOf(c *config.Config, parts string) dbInput {
	d := c.Relay.Database
	in := dbInput{URL: d.URL, Auth: c.PGAuth}
	if strings.Contains(parts, "t") {
		in.Table = c.Table().String()
	}
	if strings.Contains(parts, "s") {
		in.Slot = d.Slot
	}
	if strings.Contains(parts, "p") {
		in.Publication = d.Publication
	}
	if strings.Contains(parts, "r") {
		in.ReplicationURL = d.ReplicationURL
	}
	return in
}

func kafkaOf(c *config.Config) kafkaInput {
	k := c.Relay.Kafka
	return kafkaInput{Brokers: k.Brokers, Conn: c.KafkaConn, MetadataTTL: k.MetadataTTL, SessionLifetime: k.SessionLifetime}
}

// publishOf is a command's publisher (config.Config.Publish), with the
// Kafka connection as the flags describe it.
func publishOf(c *config.Config, clientID string) struct {
	Publish kafkaclients.Publish
	Kafka   kafkaInput
} {
	return struct {
		Publish kafkaclients.Publish
		Kafka   kafkaInput
	}{c.Publish(clientID), kafkaOf(c)}
}

// dlqPublishOf is dlq retry's and discard's writer (dlqPublish).
func dlqPublishOf(c *config.Config) any {
	return struct {
		Publish kafkaclients.Publish
		Kafka   kafkaInput
	}{dlqPublish(c), kafkaOf(c)}
}

// streaming is what run and recover hand to the relay and the process.
type streaming struct {
	Log         logInput
	Auth        pgauth.Options
	Kafka       kafkaInput
	Relay       relay.Config
	MetricsAddr string
	PProf       bool
	PProfAddr   string
	MaxProcs    int
	Trace       config.Trace
}

func streamingOf(c *config.Config) streaming {
	return streaming{Log: logOf(c), Auth: c.PGAuth, Kafka: kafkaOf(c), Relay: c.Relay, MetricsAddr: c.MetricsAddr,
		PProf: c.PProf, PProfAddr: c.PProfAddr, MaxProcs: c.MaxProcs, Trace: c.Trace}
}

func (*runCmd) effective(x *invocation) any { return streamingOf(x.cfg) }

func (c *recoverCmd) effective(x *invocation) any {
	return struct {
		Run        streaming
		Since      string
		All, NoRun bool
	}{streamingOf(x.cfg), c.Since, c.All, c.NoRun}
}

func (c *replayCmd) effective(x *invocation) any {
	return struct {
		Log     logInput
		DB      dbInput
		Options any
		Publish any
	}{logOf(x.cfg), dbOf(x.cfg, "ts"), c.Options, publishOf(x.cfg, "outbox-relay")}
}

func (c *migrateCmd) effective(x *invocation) any {
	cfg := x.cfg
	return struct {
		Log                           logInput
		DB                            dbInput
		FailoverSlot, FailoverSlotSet bool
		GrantRole, PayloadType        string
		GrantCleanup, NullablePayload bool
	}{logOf(cfg), dbOf(cfg, "tspr"), !cfg.Relay.Database.NoFailoverSlot, cfg.FailoverSlotSet,
		cfg.GrantRole, cfg.PayloadType, cfg.GrantCleanup, cfg.NullablePayload}
}

func (*slotCmd) effective(x *invocation) any {
	return struct {
		Log logInput
		DB  dbInput
	}{logOf(x.cfg), dbOf(x.cfg, "spr")}
}

func (*slotCreateCmd) effective(x *invocation) any {
	return struct {
		Log          logInput
		DB           dbInput
		FailoverSlot bool
	}{logOf(x.cfg), dbOf(x.cfg, "tspr"), !x.cfg.Relay.Database.NoFailoverSlot}
}

func (*checkpointCmd) effective(x *invocation) any {
	// show compares with the slot (on the standby with --replication-url);
	// reset only deletes the checkpoint rows.
	parts := "ts"
	if x.kctx.Selected().Name == "show" {
		parts = "tspr"
	}
	return struct {
		Log logInput
		DB  dbInput
	}{logOf(x.cfg), dbOf(x.cfg, parts)}
}

func (c *cleanupCmd) effective(x *invocation) any {
	return struct {
		Log     logInput
		DB      dbInput
		Options any
	}{logOf(x.cfg), dbOf(x.cfg, "ts"), c.Options}
}

func (c *dlqListCmd) effective(x *invocation) any {
	return struct {
		Log       logInput
		DB        dbInput
		Target    any
		All, JSON bool
	}{logOf(x.cfg), dbOf(x.cfg, "t"), c.Target, c.All, c.JSON}
}

func (c *dlqShowCmd) effective(x *invocation) any {
	return struct {
		Log     logInput
		DB      dbInput
		EventID string
	}{logOf(x.cfg), dbOf(x.cfg, "t"), c.EventID}
}

func (c *dlqRetryCmd) effective(x *invocation) any {
	return struct {
		Log     logInput
		DB      dbInput
		Target  any
		EventID string
		Wait    time.Duration
		Publish any
	}{logOf(x.cfg), dbOf(x.cfg, "tspr"), c.Target, c.EventID, c.Wait, dlqPublishOf(x.cfg)}
}

func (c *dlqDiscardCmd) effective(x *invocation) any {
	return struct {
		Log             logInput
		DB              dbInput
		EventID, Reason string
		Wait            time.Duration
		Publish         any
	}{logOf(x.cfg), dbOf(x.cfg, "tspr"), c.EventID, c.Reason, c.Wait, dlqPublishOf(x.cfg)}
}

func (c *doctorCmd) effective(x *invocation) any {
	cfg := x.cfg
	p := cfg.Relay.Publish
	return struct {
		Log                                                            logInput
		DB                                                             dbInput
		Kafka                                                          kafkaInput
		TopicTemplate                                                  string
		Idempotent                                                     bool
		Delivery                                                       relay.Delivery
		PositionsTopic, TransactionalID                                string
		TransactionTimeout                                             time.Duration
		StandbyURL                                                     []string
		Topics                                                         string
		ConsumerDedupeRetention, CleanupOlderThan, CheckpointRetention time.Duration
		Registry                                                       any
	}{logOf(cfg), dbOf(cfg, "tspr"), kafkaOf(cfg), p.TopicTemplate, !p.NoIdempotence, p.Delivery,
		p.PositionsTopic, p.TransactionalID, p.TransactionTimeout, c.StandbyURL, c.Topics,
		c.ConsumerDedupeRetention, c.CleanupOlderThan, c.CheckpointRetention, registryOf(p.Record)}
}

// registryOf is what a command checks or encodes with the registry: the
// record configuration of a registry format, nil for the other formats.
func registryOf(rc record.Config) any {
	if !rc.Format.Registry() {
		return nil
	}
	return rc
}

func (c *reconcileCmd) effective(x *invocation) any {
	return struct {
		Log           logInput
		DB            dbInput
		Kafka         kafkaInput
		TopicTemplate string
		Options       any
	}{logOf(x.cfg), dbOf(x.cfg, "t"), kafkaOf(x.cfg), x.cfg.Relay.Publish.TopicTemplate, c.Options}
}
