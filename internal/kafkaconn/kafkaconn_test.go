package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testpki"
)

type pki struct {
	caFile, otherCAFile   string
	clientCert, clientKey string
	otherCert, otherKey   string
	server                tls.Certificate
	pool                  *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca, err := testpki.NewCA("test-ca")
	must(t, err)
	other, err := testpki.NewCA("other-ca")
	must(t, err)
	p := &pki{}
	p.caFile, err = ca.WriteCA(dir, "ca")
	must(t, err)
	p.otherCAFile, err = other.WriteCA(dir, "other-ca")
	must(t, err)
	cl, err := ca.Client("relay")
	must(t, err)
	p.clientCert, p.clientKey, err = cl.Write(dir, "client")
	must(t, err)
	ocl, err := other.Client("relay")
	must(t, err)
	p.otherCert, p.otherKey, err = ocl.Write(dir, "other-client")
	must(t, err)
	srv, err := ca.Server("broker")
	must(t, err)
	p.server, err = tls.X509KeyPair(srv.CertPEM, srv.KeyPEM)
	must(t, err)
	p.pool = x509.NewCertPool()
	p.pool.AppendCertsFromPEM(ca.CertPEM)
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// listen serves TLS handshakes requiring a client certificate from the
// test CA. After a successful handshake it sends one byte, so the client
// knows at once that its certificate was accepted; a rejected one gets the
// handshake's alert instead.
func (p *pki) listen(t *testing.T) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{p.server}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool,
	})
	must(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if c.(*tls.Conn).Handshake() != nil {
					return
				}
				_, _ = c.Write([]byte{1})
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dialWith(t *testing.T, c Config, addr string) error {
	t.Helper()
	s, err := c.Build()
	must(t, err)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, s.TLS)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3: a rejected client certificate shows on the first read, an
	// accepted one as the server's byte. The deadline (wall-clock: real
	// sockets, no synctest) only bounds a server that never answers.
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return fmt.Errorf("no answer from the server after the handshake: %w", err)
	}
	return err
}

func TestTLSVerificationAndClassify(t *testing.T) {
	p := newPKI(t)
	addr := p.listen(t)
	cases := []struct {
		name string
		cfg  TLSConfig
		want Failure
	}{
		{"ok", TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey}, FailureNone},
		{"wrong CA", TLSConfig{CAFile: p.otherCAFile, CertFile: p.clientCert, KeyFile: p.clientKey}, FailureUnknownAuthority},
		{"system roots", TLSConfig{Enabled: true, CertFile: p.clientCert, KeyFile: p.clientKey}, FailureUnknownAuthority},
		{"wrong name", TLSConfig{CAFile: p.caFile, CertFile: p.clientCert, KeyFile: p.clientKey, ServerName: "elsewhere"}, FailureHostname},
		{"client cert of another CA", TLSConfig{CAFile: p.caFile, CertFile: p.otherCert, KeyFile: p.otherKey}, FailureRejected},
		{"no client cert", TLSConfig{CAFile: p.caFile}, FailureRejected},
		{"explicit skip-verify", TLSConfig{InsecureSkipVerify: true, CertFile: p.clientCert, KeyFile: p.clientKey}, FailureNone},
	}
	for _, c := range cases {
		err := dialWith(t, Config{TLS: c.cfg}, addr)
		if c.want == FailureNone && err != nil {
			t.Errorf("%s: %v, want the server's byte", c.name, err)
		}
		if got := Classify(err); got != c.want {
			t.Errorf("%s: Classify(%v) = %q, want %q", c.name, err, got, c.want)
		}
		// kafka-go wraps errors with fmt; the class survives.
		if got := Classify(fmt.Errorf("kafka.(*Client).Metadata: %w", err)); got != c.want {
			t.Errorf("%s wrapped: %q", c.name, got)
		}
	}
}

func TestPlaintextToTLSListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\n"))
			c.Close()
		}
	}()
	s, err := Config{TLS: TLSConfig{Enabled: true}}.Build()
	must(t, err)
	_, err = tls.Dial("tcp", ln.Addr().String(), s.TLS)
	if Classify(err) != FailureNotTLS {
		t.Fatalf("Classify(%v) = %q", err, Classify(err))
	}
}

func TestBuild(t *testing.T) {
	p := newPKI(t)
	s, err := Config{}.Build()
	if err != nil || s.TLS != nil || s.SASL != nil || s.Describe() != "PLAINTEXT" {
		t.Fatalf("zero config: %+v %v", s, err)
	}
	for mech, name := range map[string]string{"plain": "PLAIN", "SCRAM-sha-256": "SCRAM-SHA-256", "scram-sha-512": "SCRAM-SHA-512"} {
		s, err := Config{TLS: TLSConfig{CAFile: p.caFile}, SASL: SASLConfig{Mechanism: mech, Username: "u", Password: "p"}}.Build()
		if err != nil || s.SASL.Name() != name || s.TLS == nil || s.TLS.MinVersion != tls.VersionTLS12 {
			t.Fatalf("%s: %+v %v", mech, s, err)
		}
		if d := s.Describe(); d != "SASL_SSL ("+name+")" || strings.Contains(d, "p") && strings.Contains(d, "=p") {
			t.Fatalf("Describe %q", d)
		}
	}
	_, err = Config{TLS: TLSConfig{CertFile: p.clientCert}, SASL: SASLConfig{Mechanism: "gssapi"}}.Build()
	var fe *SettingError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "TLS.KeyFile") || !strings.Contains(err.Error(), "SASL.Mechanism") {
		t.Fatalf("got %v", err)
	}
	// Transports get their own copy: kafka-go writes ServerName into it.
	s, _ = Config{TLS: TLSConfig{CAFile: p.caFile}}.Build()
	a, b := s.Transport("x", time.Second, time.Second), s.Transport("y", time.Second, time.Second)
	if a.TLS == b.TLS || a.TLS == s.TLS || s.Dialer("z", time.Second).TLS == s.TLS {
		t.Fatal("TLS config shared")
	}
	if Classify(kafka.SASLAuthenticationFailed) != FailureSASLAuthentication || Classify(kafka.UnsupportedSASLMechanism) != FailureSASLMechanism ||
		Classify(kafka.LeaderNotAvailable) != FailureNone || Classify(nil) != FailureNone {
		t.Fatal("kafka error classes")
	}
}
