package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
	"github.com/outbox-relay/outbox-relay/internal/envflag"
)

// candidate is a non-default value of a flag, with the other flags it
// needs to be valid (given to the baseline too).
type candidate struct {
	value string
	with  []string
}

// candidatesOf are the values TestEveryFlagHonouredOrRefused gives flag f,
// in order: the first the command accepts must change its effective
// configuration. files are valid files of each kind.
func candidatesOf(f *kong.Flag, files map[string]string) []candidate {
	plain := func(vs ...string) []candidate {
		var out []candidate
		for _, v := range vs {
			out = append(out, candidate{value: v})
		}
		return out
	}
	oauth := []string{"--kafka-sasl-mechanism=OAUTHBEARER"}
	switch f.Name {
	case "log-level":
		return plain("debug")
	case "log-format":
		return plain("console")
	case "database-url", "consumer-database-url":
		return plain("postgres://relay2@127.0.0.1:1/app2")
	case "replication-url":
		return plain("postgres://relay@127.0.0.1:3/app")
	case "standby-url":
		return plain("postgres://relay@127.0.0.1:5/app")
	case "database-password-file", "kafka-sasl-oauth-token-file":
		return []candidate{{value: files["text"]}, {value: files["text"], with: oauth}}
	case "database-auth":
		return []candidate{{value: "aws-rds-iam", with: []string{"--database-url=postgres://relay@127.0.0.1:1/app?sslmode=verify-full"}}}
	case "database-aws-region":
		return []candidate{{value: "eu-west-1"}, {value: "eu-west-1", with: []string{"--database-auth=aws-rds-iam", "--database-url=postgres://relay@127.0.0.1:1/app?sslmode=verify-full"}}}
	case "kafka-brokers":
		return plain("127.0.0.1:2")
	case "table":
		return plain("public.outbox2")
	case "topic-template":
		return plain("{event_type}")
	case "record-format":
		return plain("debezium")
	case "cloudevents-source":
		return []candidate{{value: "/x"}, {value: "/x", with: []string{"--record-format=cloudevents"}}}
	case "cloudevents-mode":
		return []candidate{{value: "structured"}, {value: "structured", with: []string{"--record-format=cloudevents", "--cloudevents-source=/x"}}}
	case "debezium-expand-json-payload":
		return []candidate{{value: "true"}, {value: "true", with: []string{"--record-format=debezium"}}}
	case "delivery":
		return plain("exactly-once")
	case "transactional-id", "transaction-interval", "transaction-timeout":
		v := map[string]string{"transactional-id": "tid2", "transaction-interval": "3s", "transaction-timeout": "3m"}[f.Name]
		return []candidate{{value: v}, {value: v, with: []string{"--delivery=exactly-once"}}}
	case "poison-policy":
		return plain("halt")
	case "positions-topic":
		return plain("pos.orders")
	case "kafka-tls-ca-file":
		return plain(files["ca"])
	case "kafka-tls-cert-file":
		return []candidate{{value: files["cert"], with: []string{"--kafka-tls-key-file=" + files["key"]}}}
	case "kafka-tls-key-file":
		return []candidate{{value: files["key"], with: []string{"--kafka-tls-cert-file=" + files["cert"]}}}
	case "kafka-tls-server-name":
		return plain("kafka.example")
	case "kafka-sasl-mechanism":
		return []candidate{{value: "PLAIN", with: []string{"--kafka-sasl-username=u", "--kafka-sasl-password=p"}}}
	case "kafka-sasl-username", "kafka-sasl-password":
		return []candidate{{value: "v2", with: []string{"--kafka-sasl-mechanism=PLAIN", "--kafka-sasl-username=u", "--kafka-sasl-password=p"}}}
	case "kafka-sasl-oauth-token-endpoint":
		return []candidate{{value: "https://idp.example/token", with: append(oauth, "--kafka-sasl-oauth-client-id=c", "--kafka-sasl-oauth-client-secret=s")}}
	case "kafka-sasl-oauth-client-id", "kafka-sasl-oauth-client-secret", "kafka-sasl-oauth-scope":
		return []candidate{{value: "v2", with: append(oauth, "--kafka-sasl-oauth-token-endpoint=https://idp.example/token",
			"--kafka-sasl-oauth-client-id=c", "--kafka-sasl-oauth-client-secret=s")}}
	case "kafka-sasl-oauth-extensions":
		return []candidate{{value: "k=v", with: append(oauth, "--kafka-sasl-oauth-token-file="+files["text"])}}
	case "kafka-sasl-session-lifetime":
		return []candidate{{value: "10m", with: []string{"--kafka-sasl-mechanism=PLAIN", "--kafka-sasl-username=u", "--kafka-sasl-password=p"}}}
	case "metrics-addr":
		return plain("127.0.0.1:9999")
	case "pprof-addr":
		return []candidate{{value: "127.0.0.1:6061", with: []string{"--pprof"}}}
	case "otlp-endpoint":
		return []candidate{{value: "http://127.0.0.1:4318"}, {value: "http://127.0.0.1:4318", with: []string{"--trace-publish"}}}
	case "trace-publish":
		return []candidate{{value: "true", with: []string{"--otlp-endpoint=http://127.0.0.1:4318"}}}
	case "grant-role":
		return plain("outbox_relay2")
	case "grant-cleanup":
		return []candidate{{value: "true", with: []string{"--grant-role=outbox_relay2"}}}
	case "payload-type":
		return plain("bytea")
	case "from-lsn", "to-lsn":
		return []candidate{{value: "0/16B3748"}, {value: "0/16B3748", with: []string{"--all=false"}}}
	case "since":
		if f.Target.Type() == reflect.TypeFor[time.Duration]() {
			return plain("3h")
		}
		return []candidate{{value: "2026-12-01T00:00:00Z"}, {value: "2026-12-01T00:00:00Z", with: []string{"--all=false"}}}
	case "from-checkpoint":
		return []candidate{{value: "true"}, {value: "true", with: []string{"--all=false"}}}
	case "all":
		return plain("true", "false")
	case "list":
		return []candidate{{value: "7"}, {value: "7", with: []string{"--dry-run"}}}
	}
	kind, _ := envflag.FlagKind(f)
	def := defaultOf(f, kind)
	var vs []string
	switch kind {
	case envflag.KindBool:
		vs = []string{"true", "false"}
	case envflag.KindInt:
		vs = []string{"3", "7", "100"}
	case envflag.KindSize:
		vs = []string{"1MiB", "3MiB"}
	case envflag.KindDuration:
		vs = []string{"3s", "45s", "3m", "1h"}
	case envflag.KindList:
		vs = []string{"a,b"}
	default:
		vs = []string{"v2"}
	}
	var out []candidate
	for _, v := range vs {
		if v != def {
			out = append(out, candidate{value: v})
		}
	}
	return out
}

// effectiveOf parses line as main does and runs the command with a
// cancelled context: refused (exit 2, the error naming flag) or its
// effective configuration, printed (dump).
func effectiveOf(t *testing.T, p *commandParser, line []string, flag string) (refused bool, eff string, msg string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	stderr := &cliStderr{Writer: redact.NewWriter(&errOut)}
	line = append(append(strings.Fields(p.name), positional[p.name]...), line...)
	c, x, err := p.configure(line, stderr)
	if err == nil {
		x.stdout = &out
		eff = dump(reflect.ValueOf(c.(configured).effective(x)))
		err = x.run(ctx)
	}
	code := outcomeOf(line[0], err, &out, stderr)
	if code == exitUsage {
		return strings.Contains(errOut.String(), "--"+flag) || strings.Contains(errOut.String(), "-"+flag), "", errOut.String()
	}
	return false, eff, errOut.String()
}

// TestEveryFlagHonouredOrRefused: for every command and every flag it
// accepts, a non-default valid value changes the configuration the
// command hands to the libraries (configured.effective), or the command
// refuses the flag (exit 2, naming it). Generated from the command tree,
// like TestBadInputEveryFlag: a new flag, or a command that takes a flag
// and drops it on the way to the library, fails here.
func TestEveryFlagHonouredOrRefused(t *testing.T) {
	sweep(t)
	helpOf(t, "migrate") // unsets OUTBOX_RELAY_* and GOMAXPROCS
	for k, v := range map[string]string{
		config.EnvPrefix + "DATABASE_URL":  "postgres://relay@127.0.0.1:1/app",
		config.EnvPrefix + "KAFKA_BROKERS": "127.0.0.1:1",
		config.EnvPrefix + "METRICS_ADDR":  "127.0.0.1:0",
	} {
		t.Setenv(k, v)
	}
	files := testFiles(t)
	flags := everyFlag(t)
	cmds := make([]string, 0, len(flags))
	for k := range flags {
		cmds = append(cmds, k)
	}
	sort.Strings(cmds)
	for _, cmd := range cmds {
		p, err := newCommandParser(cmd)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := nodeOf(p.k, cmd).Target.Addr().Interface().(configured); !ok {
			t.Errorf("%s: no effective configuration (configured)", cmd)
			continue
		}
		for _, f := range flags[cmd] {
			cands := candidatesOf(f, files)
			if len(cands) == 0 {
				t.Errorf("%s --%s: no candidate value", cmd, f.Name)
				continue
			}
			var tried []string
			ok := false
			for _, c := range cands {
				// The baseline has the other flags the value needs, unless
				// they are refused alone (a certificate without its key):
				// then it has none.
				_, base, _ := effectiveOf(t, p, c.with, "")
				if base == "" {
					if _, base, _ = effectiveOf(t, p, nil, ""); base == "" {
						t.Fatalf("%s: the base command line is refused", cmd)
					}
				}
				refused, got, msg := effectiveOf(t, p, append(slices.Clone(c.with), "--"+f.Name+"="+c.value), f.Name)
				switch {
				case refused:
					ok = true
				case got != "" && got != base:
					ok = true
				case got == "":
					tried = append(tried, fmt.Sprintf("%q with %v: exit 2 not naming the flag: %.300s", c.value, c.with, msg))
				default:
					tried = append(tried, fmt.Sprintf("%q with %v: accepted, effective configuration unchanged", c.value, c.with))
				}
				if ok {
					break
				}
			}
			if !ok {
				t.Errorf("%s --%s: neither honoured nor refused:\n  %s", cmd, f.Name, strings.Join(tried, "\n  "))
			}
		}
	}
}

// dump prints v for comparison: exported fields only, pointers followed,
// a func as whether it is set.
func dump(v reflect.Value) string {
	var b strings.Builder
	var walk func(v reflect.Value, depth int)
	walk = func(v reflect.Value, depth int) {
		if depth > 12 {
			b.WriteString("…")
			return
		}
		switch v.Kind() {
		case reflect.Invalid:
			b.WriteString("<nil>")
		case reflect.Pointer, reflect.Interface:
			if v.IsNil() {
				b.WriteString("nil")
				return
			}
			if v.Kind() == reflect.Interface {
				b.WriteString(v.Elem().Type().String())
			}
			walk(v.Elem(), depth+1)
		case reflect.Func:
			fmt.Fprintf(&b, "func(set=%v)", !v.IsNil())
		case reflect.Struct:
			b.WriteString("{")
			for i := range v.NumField() {
				if f := v.Type().Field(i); f.IsExported() {
					b.WriteString(f.Name + ":")
					walk(v.Field(i), depth+1)
					b.WriteString(" ")
				}
			}
			b.WriteString("}")
		case reflect.Slice, reflect.Array:
			b.WriteString("[")
			for i := range v.Len() {
				walk(v.Index(i), depth+1)
				b.WriteString(",")
			}
			b.WriteString("]")
		case reflect.Map:
			keys := v.MapKeys()
			sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
			b.WriteString("map[")
			for _, k := range keys {
				fmt.Fprintf(&b, "%v:", k)
				walk(v.MapIndex(k), depth+1)
				b.WriteString(",")
			}
			b.WriteString("]")
		default:
			fmt.Fprintf(&b, "%v", v)
		}
	}
	walk(v, 0)
	return b.String()
}

// testFiles writes a CA, a client certificate and key, and a text file.
func testFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"ca": filepath.Join(dir, "ca.pem"), "cert": filepath.Join(dir, "cert.pem"), "key": filepath.Join(dir, "key.pem"),
		"text": filepath.Join(dir, "secret")}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for name, data := range map[string][]byte{"ca": cert, "cert": cert, "key": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}),
		"text": []byte("s3cret\n")} {
		if err := os.WriteFile(files[name], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return files
}
