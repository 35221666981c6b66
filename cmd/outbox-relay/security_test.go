package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/pgauth"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
)

func baseEnv(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u:dbpass-123@h:5432/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
}

func TestSecretsFromFiles(t *testing.T) {
	baseEnv(t)
	dir := t.TempDir()
	url := filepath.Join(dir, "url")
	pw := filepath.Join(dir, "pw")
	os.WriteFile(url, []byte("postgres://relay:from-file-1@db:5432/app?sslmode=verify-full\n"), 0o600)
	os.WriteFile(pw, []byte("sasl-secret\r\n"), 0o600)
	os.Unsetenv("OUTBOX_RELAY_DATABASE_URL")
	t.Setenv("OUTBOX_RELAY_DATABASE_URL_FILE", url)
	t.Setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", pw)
	sink := redact.NewWriter(&bytes.Buffer{})
	cfg, err := parse("run", []string{"--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-username", "relay"}, sink)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Relay.Database.URL != "postgres://relay:from-file-1@db:5432/app?sslmode=verify-full" || cfg.KafkaConn.SASL.Password != "sasl-secret" {
		t.Fatalf("url %q password %q", cfg.Relay.Database.URL, cfg.KafkaConn.SASL.Password)
	}
	if cfg.Relay.Kafka.SASL != cfg.KafkaSecurity().SASL {
		t.Fatal("relay.Config's Kafka.SASL is not the one built from the flags")
	}
	if cfg.KafkaSecurity().SASL == nil || cfg.KafkaSecurity().SASL.Name() != "SCRAM-SHA-512" {
		t.Fatalf("SASL %v", cfg.KafkaSecurity().SASL)
	}
	if got := sink.String("from-file-1,sasl-secret"); got != redact.Mask+","+redact.Mask {
		t.Fatalf("config.Secrets not registered for redaction: %q", got)
	}
}

func TestSecretFileErrors(t *testing.T) {
	baseEnv(t)
	t.Setenv("OUTBOX_RELAY_DATABASE_URL_FILE", "/nonexistent/url")
	_, err := parse("run", nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "both OUTBOX_RELAY_DATABASE_URL and OUTBOX_RELAY_DATABASE_URL_FILE are set") {
		t.Fatalf("got %v", err)
	}
	os.Unsetenv("OUTBOX_RELAY_DATABASE_URL")
	_, err = parse("run", nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_RELAY_DATABASE_URL_FILE: stat /nonexistent/url") {
		t.Fatalf("got %v", err)
	}
	// Issue 36, row 5: /dev/zero ended the process with "out of memory".
	t.Setenv("OUTBOX_RELAY_DATABASE_URL_FILE", "/dev/zero")
	_, err = parse("run", nil, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "OUTBOX_RELAY_DATABASE_URL_FILE: /dev/zero is not a regular file (a device)") {
		t.Fatalf("got %v", err)
	}
	os.Unsetenv("OUTBOX_RELAY_DATABASE_URL_FILE")
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u@h/db")
	t.Setenv("OUTBOX_RELAY_DATABASE_PASSWORD_FILE", "/dev/zero")
	cfg, err := parse("run", nil, &bytes.Buffer{})
	if err == nil {
		// The password file is read at every connection.
		_, err = pgauth.ReadPasswordFile(cfg.PGAuth.PasswordFile)
	}
	if err == nil || !strings.Contains(err.Error(), "/dev/zero is not a regular file") {
		t.Fatalf("password file /dev/zero: %v", err)
	}
}

// TestExposedSecretFileWarns: a secret file every user may read, reached
// through a symlink, is warned about at start; a 0640 one is not (issue
// 36, row 5: accepted silently).
func TestExposedSecretFileWarns(t *testing.T) {
	baseEnv(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "sasl")
	if err := os.WriteFile(target, []byte("pw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(target, 0o644)
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", link)
	warnings := func() string {
		cfg, err := parse("run", []string{"--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "u", "--kafka-tls"}, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		cfg.WarnInsecure(slog.New(slog.NewTextHandler(&logs, nil)), true)
		return logs.String()
	}
	if w := warnings(); !strings.Contains(w, "a secret file is readable by every user") || !strings.Contains(w, link) {
		t.Errorf("0644 secret file: no warning:\n%s", w)
	}
	os.Chmod(target, 0o640)
	if w := warnings(); strings.Contains(w, "a secret file") {
		t.Errorf("0640 secret file warned about:\n%s", w)
	}
}

func TestKafkaSecurityConfigSaysHowToFix(t *testing.T) {
	baseEnv(t)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	os.WriteFile(ca, []byte("not a certificate"), 0o600)
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--kafka-tls-cert-file", "/c.pem"}, []string{"--kafka-tls-key-file: client certificate /c.pem has no key"}},
		{[]string{"--kafka-tls-key-file", "/k.pem"}, []string{"--kafka-tls-cert-file: client key /k.pem has no certificate"}},
		{[]string{"--kafka-tls-ca-file", ca}, []string{"--kafka-tls-ca-file: CA file " + ca + " holds no PEM certificate"}},
		{[]string{"--kafka-tls-ca-file", "/missing.pem"}, []string{"--kafka-tls-ca-file: read CA file"}},
		{[]string{"--kafka-tls-ca-file", ca, "--kafka-tls-insecure-skip-verify"}, []string{"--kafka-tls-insecure-skip-verify: skipping verification ignores the CA file"}},
		{[]string{"--kafka-sasl-mechanism", "gssapi"}, []string{`--kafka-sasl-mechanism: unknown SASL mechanism "gssapi": use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER`}},
		{[]string{"--kafka-sasl-mechanism", "OAUTHBEARER"}, []string{"--kafka-sasl-oauth-token-file: OAUTHBEARER needs a token file or a token endpoint"}},
		{[]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-endpoint", "https://idp/token"}, []string{
			"--kafka-sasl-oauth-client-id: the client-credentials grant needs a client id", "--kafka-sasl-oauth-client-secret: the client-credentials grant needs a client secret"}},
		{[]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-file", "/t", "--kafka-sasl-oauth-extensions", "auth=x"}, []string{"--kafka-sasl-oauth-extensions: oauthbearer: extension key \"auth\" is reserved"}},
		// The grant would send the client secret in clear (issue 36, row 3).
		{[]string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-endpoint", "http://idp.example:8080/token",
			"--kafka-sasl-oauth-client-id", "c", "--kafka-sasl-oauth-client-secret", "s"}, []string{
			"--kafka-sasl-oauth-token-endpoint: token endpoint http://idp.example:8080 would receive the client secret in clear text: use https (http only on a loopback address)"}},
		{[]string{"--kafka-sasl-oauth-scope", "kafka"}, []string{"--kafka-sasl-mechanism: OAuth settings are set but the SASL mechanism is \"\": use OAUTHBEARER"}},
		{[]string{"--kafka-sasl-session-lifetime", "1s"}, []string{"--kafka-sasl-session-lifetime"}},
		{[]string{"--kafka-sasl-mechanism", "plain"}, []string{"--kafka-sasl-username: SASL PLAIN needs a username", "--kafka-sasl-password: SASL PLAIN needs a password"}},
		{[]string{"--kafka-sasl-username", "u"}, []string{"--kafka-sasl-mechanism: a SASL username or password is set but no mechanism"}},
	}
	for _, c := range cases {
		_, err := parse("run", c.args, &bytes.Buffer{})
		var ce configError
		if !errors.As(err, &ce) {
			t.Errorf("%v: got %v, want a configError", c.args, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error lacks %q:\n%v", c.args, w, err)
			}
		}
	}
}

func TestInsecureSkipVerifyOnlyWhenExplicit(t *testing.T) {
	baseEnv(t)
	cfg, err := parse("run", []string{"--kafka-tls"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KafkaSecurity().TLS == nil || cfg.KafkaSecurity().TLS.InsecureSkipVerify {
		t.Fatalf("TLS %+v", cfg.KafkaSecurity().TLS)
	}
	t.Setenv("OUTBOX_RELAY_KAFKA_TLS_INSECURE_SKIP_VERIFY", "true")
	cfg, err = parse("run", nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.KafkaSecurity().TLS.InsecureSkipVerify || !strings.Contains(cfg.KafkaSecurity().Describe(), "WITHOUT certificate verification") {
		t.Fatalf("explicit skip-verify not applied: %s", cfg.KafkaSecurity().Describe())
	}
}

// TestSecretsNeverPrinted runs a command that fails on its configuration
// and one that fails to connect: stderr must not show the passwords.
func TestSecretsNeverPrinted(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://u:db-pass-9@127.0.0.1:1/db?connect_timeout=1")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "a:9092")
	t.Setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD", "sasl-pass-9")
	var out, errOut bytes.Buffer
	// Invalid: a password without mechanism; the error echoes nothing secret.
	if code := run([]string{"run", "--slot", "Bad"}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	// Runtime: nothing listens on port 1.
	if code := run([]string{"slot", "status"}, &out, &errOut); code != 1 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, sec := range []string{"db-pass-9", "sasl-pass-9"} {
		if strings.Contains(errOut.String(), sec) {
			t.Errorf("stderr shows secret %q:\n%s", sec, errOut.String())
		}
	}
	// Parsing registers the secrets on the redacting stderr, so whatever a
	// library echoes later (a connection string in an error) is masked.
	var buf bytes.Buffer
	rw := redact.NewWriter(&buf)
	// (It fails validation - a password without mechanism - and still
	// registers them first, since a validation error may quote one.)
	_, _ = parse("replay", nil, rw) // a command with both secrets
	fmt.Fprintf(rw, "echo postgres://u:db-pass-9@h/db sasl-pass-9\n")
	if strings.Contains(buf.String(), "pass-9") {
		t.Errorf("not masked: %s", buf.String())
	}
}

// TestHelpHidesSecrets: --help of every command and verb, with every kind
// of secret set through the environment or a _FILE, shows "(set)" and
// never the value (issue 36, row 1: help printed them as flag defaults,
// before they were registered for masking).
func TestHelpHidesSecrets(t *testing.T) {
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_* for the test
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte("postgres://u:FileSecret@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("OUTBOX_RELAY_DATABASE_URL_FILE", file)
	t.Setenv("OUTBOX_RELAY_KAFKA_SASL_PASSWORD", "SaslSecret")
	t.Setenv("OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET", "OAuthSecret")
	names := commandNames()
	sort.Strings(names)
	for _, name := range names {
		var out, errOut bytes.Buffer
		code := run(append(strings.Fields(name), "--help"), &out, &errOut)
		help := out.String() + errOut.String()
		if code != 0 {
			t.Errorf("%s --help: exit %d: %s", name, code, help)
			continue
		}
		for _, secret := range []string{"FileSecret", "SaslSecret", "OAuthSecret"} {
			if strings.Contains(help, secret) {
				t.Errorf("%s --help shows %s", name, secret)
			}
		}
		if strings.Contains(help, "-database-url") && !strings.Contains(help, "OUTBOX_RELAY_DATABASE_URL_FILE) (set)") {
			t.Errorf("%s --help does not say the database URL is set", name)
		}
	}
}

// TestOAuthOverPlaintext: an http token endpoint is accepted on a
// loopback address only (a sidecar), and OAUTHBEARER without TLS is
// warned about as PLAIN is: the bearer token travels in clear (issue 36,
// row 3).
func TestOAuthOverPlaintext(t *testing.T) {
	baseEnv(t)
	for _, endpoint := range []string{"http://127.0.0.1:8080/token", "http://localhost/token", "http://[::1]:9/token", "https://idp.example/token"} {
		cfg, err := parse("run", []string{"--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-endpoint", endpoint,
			"--kafka-sasl-oauth-client-id", "c", "--kafka-sasl-oauth-client-secret", "s"}, &bytes.Buffer{})
		if err != nil {
			t.Errorf("%s: %v", endpoint, err)
			continue
		}
		var logs bytes.Buffer
		cfg.WarnInsecure(slog.New(slog.NewTextHandler(&logs, nil)), true)
		if !strings.Contains(logs.String(), "SASL OAUTHBEARER without TLS sends the bearer token in clear text") {
			t.Errorf("%s without --kafka-tls: no warning:\n%s", endpoint, logs.String())
		}
	}
	cfg, err := parse("run", []string{"--kafka-tls", "--kafka-sasl-mechanism", "OAUTHBEARER", "--kafka-sasl-oauth-token-file", "/t"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg.WarnInsecure(slog.New(slog.NewTextHandler(&logs, nil)), true)
	if strings.Contains(logs.String(), "OAUTHBEARER without TLS") {
		t.Errorf("warned with --kafka-tls:\n%s", logs.String())
	}
}
