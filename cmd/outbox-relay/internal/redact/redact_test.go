package redact

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func TestWriterMasksEveryForm(t *testing.T) {
	const secret = `p@ss w"rd/1`
	var buf bytes.Buffer
	w := NewWriter(&buf)
	w.Add(secret, "", "ab") // empty and short ones are ignored
	log := zerolog.New(w)
	log.Error().Str("dsn", "postgres://relay:p%40ss%20w%22rd%2F1@db/x").Str("raw", secret).
		Msg("failed: password " + secret)
	out := buf.String()
	for _, form := range []string{secret, `p%40ss%20w%22rd%2F1`, `w\"rd`} {
		if strings.Contains(out, form) {
			t.Errorf("log line contains %q: %s", form, out)
		}
	}
	if !strings.Contains(out, Mask) {
		t.Errorf("no mask in %s", out)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Errorf("masked line is not JSON any more: %v: %s", err, out)
	}
}

func TestWriterWithoutSecretsPassesThrough(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	if _, err := w.Write([]byte("hello")); err != nil || buf.String() != "hello" {
		t.Fatalf("got %q, %v", buf.String(), err)
	}
	if got := w.String("x"); got != "x" {
		t.Fatalf("String = %q", got)
	}
}

func TestDSNSecrets(t *testing.T) {
	cases := map[string][]string{
		"postgres://u:secret1@h:5432/db?sslmode=verify-full":       {"secret1"},
		"postgres://u@h/db?password=qpass&sslpassword=keypass":     {"qpass", "keypass"},
		"postgresql://u:p%2Fw@h/db":                                {"p/w"},
		"host=h user=u password='kv secret' dbname=d":              {"kv secret"},
		`password='it\'s' user=u`:                                  {"it's"},
		"host=h user=u password=kvsecret sslpassword=kp2 dbname=d": {"kvsecret", "kp2"},
		"postgres://u@h/db":                                        nil,
		// libpq's several hosts, which net/url misreads or rejects.
		"postgres://u:multi1@h1:5432,h2:5433/db?target_session_attrs=read-write":            {"multi1"},
		"postgres://u:v6pass@[::1]:5432,[::1]:5433/db":                                      {"v6pass"},
		"postgresql://u@h1,h2/db?sslpassword=k%2By&password=a+b":                            {"a+b", "k+y", "a b"},
		"host=h1,h2 port=5432,5433 user=u password=kvmulti target_session_attrs=read-write": {"kvmulti"},
	}
	for dsn, want := range cases {
		got := DSNSecrets(dsn)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("DSNSecrets(%q) = %q, want %q", dsn, got, want)
		}
	}
}

func TestParam(t *testing.T) {
	for _, c := range []struct{ dsn, key, want string }{
		{"postgres://u@db.example:5432/app?sslmode=verify-full", "sslmode", "verify-full"},
		{"postgres://u@db.example:5432/app", "host", "db.example"},
		{"host=db.example dbname=app sslmode = require", "sslmode", "require"},
		{"host='/var/run/postgresql' dbname=app", "host", "/var/run/postgresql"},
		{"dbname=app", "host", ""},
		{"postgres://u:p@h1:5432,h2:5433/app?target_session_attrs=read-write", "host", "h1,h2"},
		{"postgres://u:p@h1:5432,h2:5433/app?target_session_attrs=read-write", "target_session_attrs", "read-write"},
		{"postgres://[::1]:5432,127.0.0.1/app", "host", "::1,127.0.0.1"},
		{"postgres://u@h1,h2/app?host=/tmp", "host", "/tmp"},
		{"host=a,b port=1,2 dbname=app", "host", "a,b"},
	} {
		if got := Param(c.dsn, c.key); got != c.want {
			t.Errorf("Param(%q, %q) = %q, want %q", c.dsn, c.key, got, c.want)
		}
	}
}
