package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/tracing"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/loopback"
	"github.com/outbox-relay/outbox-relay/internal/secretfile"
)

// kafkaFlagErrors renames kafkaconn's setting errors (of config.KafkaConn)
// after the flags.
func kafkaFlagErrors(set *envflag.Set, err error) []error {
	return settingFlagErrors(set, kafkaConnPrefix, err)
}

// settingFlagErrors renames kafkaconn's setting errors after the flags
// whose field is prefix + the setting's ("Registry" + "TLS.CAFile").
func settingFlagErrors(set *envflag.Set, prefix string, err error) []error {
	var out []error
	for _, e := range unjoin(err) {
		var fe *kafkaconn.SettingError
		if errors.As(e, &fe) {
			if name, ok := set.Flag(prefix + fe.Field); ok {
				e = fmt.Errorf("%s: %w", name, fe.Err)
			}
		}
		out = append(out, e)
	}
	return out
}

// Secrets lists the values that must never be printed: the Secret flags'
// values, the passwords in the connection strings, and the OTLP request
// headers' values (OTEL_EXPORTER_OTLP_HEADERS: tokens, which a collector's
// error answer may echo into the SDK's message).
func Secrets(set *envflag.Set) []string {
	plain, dsns := set.Secrets()
	var s []string
	for _, p := range plain {
		if p != "" {
			s = append(s, p)
		}
	}
	for _, d := range dsns {
		s = append(s, redact.DSNSecrets(d)...)
	}
	return append(s, tracing.HeaderSecrets()...)
}

// warnInsecure logs settings that weaken a secure setup; they are allowed,
// since they are explicit, but should never go unnoticed.
func (c *Config) WarnInsecure(log *slog.Logger, kafka bool) {
	if kafka {
		sec := c.kafkaSecurity
		log.Info("kafka connection security", slog.String("stage", "startup"), slog.String("kafka_security", sec.Describe()))
		if sec.TLS != nil && sec.TLS.InsecureSkipVerify {
			log.Warn("--kafka-tls-insecure-skip-verify: broker certificates are not verified, anyone on the path can impersonate the broker and read the SASL credentials", slog.String("stage", "startup"))
		}
		if sec.TLS == nil && sec.SASL != nil && strings.EqualFold(sec.SASL.Name(), kafkaconn.MechanismPlain) {
			log.Warn("SASL PLAIN without TLS sends the password in clear text: enable --kafka-tls", slog.String("stage", "startup"))
		}
		if sec.TLS == nil && sec.SASL != nil && strings.EqualFold(sec.SASL.Name(), kafkaconn.MechanismOAuthBearer) {
			log.Warn("SASL OAUTHBEARER without TLS sends the bearer token in clear text, and anyone who reads it may use it until it expires: enable --kafka-tls", slog.String("stage", "startup"))
		}
	}
	for _, f := range c.secretFiles {
		if secretfile.Exposed(f) {
			log.Warn("a secret file is readable by every user of this machine: chmod o-rwx it (0600, or 0640 for a group such as Kubernetes' fsGroup)",
				slog.String("stage", "startup"), slog.String("file", f))
		}
	}
	for _, u := range []struct{ url, flag string }{{c.Relay.Database.URL, "--database-url"}, {c.Relay.Database.ReplicationURL, "--replication-url"}} {
		if u.url == "" {
			continue
		}
		mode := redact.Param(u.url, "sslmode")
		if mode == "" {
			mode = os.Getenv("PGSSLMODE") // as libpq and pgconn read it
		}
		if mode != "verify-full" && mode != "verify-ca" && !allLoopback(effectiveHosts(u.url)) {
			log.Warn("the PostgreSQL connection does not verify the server's certificate: use sslmode=verify-full (with sslrootcert=CA file) in "+u.flag,
				slog.String("stage", "startup"), slog.String("sslmode", mode))
		}
	}
}

// effectiveHosts are the hosts a connection string reaches, as pgconn
// resolves them: a URL without a host takes PGHOST's (which counted as
// loopback before), or the local socket.
func effectiveHosts(url string) string {
	pc, err := pgconn.ParseConfig(url)
	if err != nil {
		return redact.Param(url, "host")
	}
	hosts := []string{pc.Host}
	for _, f := range pc.Fallbacks {
		hosts = append(hosts, f.Host)
	}
	return strings.Join(hosts, ",")
}

// allLoopback reports whether every host of a (multi-host) host list is local.
func allLoopback(hosts string) bool {
	for _, host := range strings.Split(hosts, ",") {
		host = strings.TrimSpace(host)
		if host == "" || strings.HasPrefix(host, "/") { // the local socket
			continue
		}
		if !loopback.Host(host) {
			return false
		}
	}
	return true
}
