package kafkaconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/outbox-relay/outbox-relay/oauthbearer"
)

// SASL mechanisms, spelled as Kafka's sasl.enabled.mechanisms spells them
// (case-insensitive in Config).
const (
	MechanismNone        = ""
	MechanismPlain       = "PLAIN"
	MechanismSCRAMSHA256 = "SCRAM-SHA-256"
	MechanismSCRAMSHA512 = "SCRAM-SHA-512"
	// MechanismOAuthBearer sends a bearer token (package oauthbearer)
	// from SASLConfig.OAuth's token file or client-credentials grant.
	MechanismOAuthBearer = oauthbearer.Name
)

// Config describes how to secure Kafka connections. The zero value is a
// PLAINTEXT connection without authentication.
type Config struct {
	TLS  TLSConfig
	SASL SASLConfig
}

// TLSConfig configures TLS. TLS is on when Enabled is set or any file or
// ServerName is given.
type TLSConfig struct {
	Enabled bool
	// CAFile is a PEM bundle of the CAs that may sign the brokers'
	// certificates; empty means the system roots.
	CAFile string
	// CertFile and KeyFile are the PEM client certificate (chain) and its
	// unencrypted private key, for brokers with ssl.client.auth=required.
	// Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the brokers' certificates are checked
	// against (default: the host of each broker address).
	ServerName string
	// InsecureSkipVerify accepts any broker certificate. It defeats TLS's
	// protection against impostors; for tests only.
	InsecureSkipVerify bool
}

// On reports whether the configuration asks for TLS.
func (c TLSConfig) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != "" || c.InsecureSkipVerify
}

// SASLConfig configures SASL authentication.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER;
	// empty disables SASL.
	Mechanism string
	// Username and Password are PLAIN's and SCRAM's credentials.
	Username string
	Password string
	// OAuth is where OAUTHBEARER gets its tokens.
	OAuth OAuthConfig
	// SessionLifetime is how long the brokers keep an authenticated
	// session (their connections.max.reauth.ms), if shorter than the
	// tokens' lifetime or with PLAIN or SCRAM; zero means only a token's
	// expiry ends a session. kafka-go cannot re-authenticate, so
	// Transports recycle their connections before a session ends
	// (Security.SessionLifetime).
	SessionLifetime time.Duration
}

// OAuthConfig is OAUTHBEARER's token source: TokenFile, or the OAuth 2.0
// client-credentials grant at TokenEndpoint.
type OAuthConfig struct {
	// TokenFile holds the token (a JWT), re-read for every new broker
	// connection, so a sidecar can keep it fresh.
	TokenFile string
	// TokenEndpoint is the identity provider's token URL (https; http only
	// on a loopback address, since the grant sends the client secret)
	// for the client-credentials grant with ClientID and ClientSecret.
	TokenEndpoint string
	ClientID      string
	ClientSecret  string
	// Scope is the space-separated scope requested; empty: the client's
	// default.
	Scope string
	// Extensions are SASL extensions, key=value pairs separated by
	// commas (Confluent Cloud: logicalCluster=lkc-…,identityPoolId=pool-…).
	Extensions string
}

func (c OAuthConfig) set() bool { return c != OAuthConfig{} }

// Security is a built Config, ready for kafka-go.
type Security struct {
	// TLS is nil for PLAINTEXT.
	TLS *tls.Config
	// SASL is nil without SASL.
	SASL sasl.Mechanism
	// SessionLifetime is SASLConfig.SessionLifetime: Transport closes its
	// connections before that much time has passed since the oldest was
	// authenticated, and before the token a connection was authenticated
	// with expires (an oauthbearer.Expirer).
	SessionLifetime time.Duration
}

// SettingError is a Build failure of one Config setting; Field is the Go
// field path (e.g. "TLS.CAFile"), so a CLI can name its own flag. (The
// library's error of a relay.Config field is relay.FieldError.)
type SettingError struct {
	Field string
	Err   error
}

func (e *SettingError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *SettingError) Unwrap() error { return e.Err }

// Build checks c and loads its files. Every error is a *SettingError
// (several are joined with errors.Join).
func (c Config) Build() (Security, error) {
	var s Security
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &SettingError{Field: field, Err: fmt.Errorf(format, args...)})
	}
	if c.TLS.On() {
		tc, tlsErrs := c.TLS.build()
		errs = append(errs, tlsErrs...)
		s.TLS = tc
	}
	if c.SASL.SessionLifetime < 0 {
		fail("SASL.SessionLifetime", "negative session lifetime %s", c.SASL.SessionLifetime)
	} else if c.SASL.SessionLifetime > 0 && c.SASL.SessionLifetime < 5*time.Second {
		fail("SASL.SessionLifetime", "session lifetime %s is under 5s: the connections would be replaced almost continuously", c.SASL.SessionLifetime)
	}
	s.SessionLifetime = c.SASL.SessionLifetime
	mech := strings.ToUpper(c.SASL.Mechanism)
	if mech != MechanismOAuthBearer && c.SASL.OAuth.set() {
		fail("SASL.Mechanism", "OAuth settings are set but the SASL mechanism is %q: use OAUTHBEARER", c.SASL.Mechanism)
	}
	switch mech {
	case MechanismNone:
		if c.SASL.Username != "" || c.SASL.Password != "" {
			fail("SASL.Mechanism", "a SASL username or password is set but no mechanism: choose PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
		}
	case MechanismOAuthBearer:
		if c.SASL.Username != "" || c.SASL.Password != "" {
			fail("SASL.Username", "OAUTHBEARER takes no username or password: the token identifies the client")
		}
		m, oerrs := c.SASL.OAuth.build()
		errs = append(errs, oerrs...)
		s.SASL = m
	case MechanismPlain, MechanismSCRAMSHA256, MechanismSCRAMSHA512:
		if c.SASL.Username == "" {
			fail("SASL.Username", "SASL %s needs a username", mech)
		}
		if c.SASL.Password == "" {
			fail("SASL.Password", "SASL %s needs a password", mech)
		}
		if c.SASL.Username == "" || c.SASL.Password == "" {
			break
		}
		m, err := mechanism(mech, c.SASL.Username, c.SASL.Password)
		if err != nil {
			fail("SASL.Password", "%v", err)
		}
		s.SASL = m
	default:
		fail("SASL.Mechanism", "unknown SASL mechanism %q: use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", c.SASL.Mechanism)
	}
	if len(errs) > 0 {
		return Security{}, errors.Join(errs...)
	}
	return s, nil
}

func mechanism(name, user, pass string) (sasl.Mechanism, error) {
	switch name {
	case MechanismPlain:
		return plain.Mechanism{Username: user, Password: pass}, nil
	case MechanismSCRAMSHA256:
		return scram.Mechanism(scram.SHA256, user, pass)
	default:
		return scram.Mechanism(scram.SHA512, user, pass)
	}
}

func (c TLSConfig) build() (*tls.Config, []error) {
	var errs []error
	fail := func(field string, err error) { errs = append(errs, &SettingError{Field: field, Err: err}) }
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.InsecureSkipVerify {
		if c.CAFile != "" {
			fail("TLS.InsecureSkipVerify", errors.New("skipping verification ignores the CA file: drop one of them"))
		}
		tc.InsecureSkipVerify = true
	}
	if c.CAFile != "" {
		pool, err := loadCAs(c.CAFile)
		if err != nil {
			fail("TLS.CAFile", err)
		}
		tc.RootCAs = pool
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		fail("TLS.KeyFile", fmt.Errorf("client certificate %s has no key: set the key file too", c.CertFile))
	case c.CertFile == "" && c.KeyFile != "":
		fail("TLS.CertFile", fmt.Errorf("client key %s has no certificate: set the certificate file too", c.KeyFile))
	case c.CertFile != "":
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			fail("TLS.CertFile", fmt.Errorf("load client certificate %s and key %s: %w (both PEM; the key unencrypted)", c.CertFile, c.KeyFile, err))
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, errs
}

func loadCAs(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// Transport returns a kafka-go Transport (for kafka.Client and
// kafka.Writer) that secures every broker connection with s. TLS config
// is cloned per Transport: kafka-go sets ServerName on it per broker when
// it is empty.
//
// With SASL, the Transport recycles its connections before their sessions
// end (see rotator): kafka-go cannot re-authenticate a connection, and
// the broker closes one at its first request after the session ended,
// failing that request.
func (s Security) Transport(clientID string, dialTimeout, metadataTTL time.Duration) *kafka.Transport {
	return s.TransportNotify(clientID, dialTimeout, metadataTTL, nil)
}

// TransportNotify is Transport with a function called (from a timer's
// goroutine) each time the Transport recycles its connections before a
// SASL session ends, with the session end that prompted it; nil is none.
func (s Security) TransportNotify(clientID string, dialTimeout, metadataTTL time.Duration, recycled func(sessionEnd time.Time)) *kafka.Transport {
	tr := &kafka.Transport{
		ClientID:    clientID,
		DialTimeout: dialTimeout,
		MetadataTTL: metadataTTL,
		TLS:         s.tlsClone(),
		SASL:        s.SASL,
	}
	if s.SASL != nil {
		tr.SASL = newRotator(s.SASL, s.SessionLifetime, tr.CloseIdleConnections, recycled)
	}
	return tr
}

// Dialer returns a kafka-go Dialer (for kafka.Conn and kafka.Reader)
// secured with s.
func (s Security) Dialer(clientID string, timeout time.Duration) *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:      clientID,
		Timeout:       timeout,
		DualStack:     true,
		TLS:           s.tlsClone(),
		SASLMechanism: s.SASL,
	}
}

func (s Security) tlsClone() *tls.Config {
	if s.TLS == nil {
		return nil
	}
	return s.TLS.Clone()
}

// Describe summarises s for a start-up log line; it never includes
// credentials.
func (s Security) Describe() string {
	proto := "PLAINTEXT"
	switch {
	case s.TLS != nil && s.SASL != nil:
		proto = "SASL_SSL"
	case s.TLS != nil:
		proto = "SSL"
	case s.SASL != nil:
		proto = "SASL_PLAINTEXT"
	}
	if s.SASL != nil {
		proto += " (" + s.SASL.Name() + ")"
	}
	if s.TLS != nil && len(s.TLS.Certificates) > 0 {
		proto += " with client certificate"
	}
	if s.TLS != nil && s.TLS.InsecureSkipVerify {
		proto += " WITHOUT certificate verification"
	}
	return proto
}

// Failure names a connection failure that retrying cannot cure.
type Failure string

// Failures Classify recognises.
const (
	// FailureNone: not a security failure (the network, a busy broker...).
	FailureNone Failure = ""
	// FailureUnknownAuthority: the broker's certificate is not signed by
	// a trusted CA.
	FailureUnknownAuthority Failure = "tls_unknown_authority"
	// FailureHostname: the broker's certificate does not name the host.
	FailureHostname Failure = "tls_hostname"
	// FailureCertificateInvalid: expired, not yet valid, or unusable.
	FailureCertificateInvalid Failure = "tls_certificate_invalid"
	// FailureNotTLS: the broker's listener does not speak TLS.
	FailureNotTLS Failure = "tls_not_tls"
	// FailureNeedsTLS: a PLAINTEXT client reached a TLS listener.
	FailureNeedsTLS Failure = "tls_required"
	// FailureRejected: the broker aborted the handshake with an alert,
	// typically because it wants a (different) client certificate.
	FailureRejected Failure = "tls_rejected"
	// FailureSASLAuthentication: wrong SASL username or password.
	FailureSASLAuthentication Failure = "sasl_authentication"
	// FailureSASLMechanism: the broker does not enable the mechanism.
	FailureSASLMechanism Failure = "sasl_mechanism"
	// FailureSASLToken: the identity provider refused the OAuth client
	// (wrong client id, secret or scope).
	FailureSASLToken Failure = "sasl_token"
	// FailureSASLTokenRedirect: the OAuth token endpoint redirected the
	// request, which is never followed (the client secret would go to a
	// URL nobody checked): the configured URL is not the endpoint.
	FailureSASLTokenRedirect Failure = "sasl_token_redirect"
)

// Classify recognises security failures in a kafka-go error.
func Classify(err error) Failure {
	if err == nil {
		return FailureNone
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	var alert tls.AlertError
	var kerr kafka.Error
	var herr *oauthbearer.HTTPError
	var rerr *oauthbearer.RedirectError
	switch {
	case errors.As(err, &rerr):
		return FailureSASLTokenRedirect
	case errors.As(err, &herr):
		if herr.Permanent() {
			return FailureSASLToken
		}
	case errors.As(err, &ua):
		return FailureUnknownAuthority
	case errors.As(err, &he):
		return FailureHostname
	case errors.As(err, &ci):
		return FailureCertificateInvalid
	case errors.As(err, &rh):
		return FailureNotTLS
	case errors.As(err, &alert):
		return FailureRejected
	case errors.As(err, &kerr):
		switch kerr {
		case kafka.SASLAuthenticationFailed:
			return FailureSASLAuthentication
		case kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState:
			return FailureSASLMechanism
		}
	}
	// kafka-go flattens some handshake errors into text.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "x509: certificate signed by unknown authority"):
		return FailureUnknownAuthority
	case strings.Contains(msg, "remote error: tls:"):
		return FailureRejected
	case strings.Contains(msg, "first record does not look like a TLS handshake"):
		return FailureNotTLS
	case strings.Contains(msg, "broker appears to be expecting TLS"):
		return FailureNeedsTLS
	}
	return FailureNone
}

// WithMetadataTopics returns a new Transport with tr's settings whose
// metadata cache covers only topics (sorted, without duplicates; empty:
// the brokers alone). kafka-go refreshes a Transport's cache every
// MetadataTTL for every topic of the cluster unless MetadataTopics is
// set, and reads MetadataTopics once per connection pool, so the only
// way to widen the set as topics appear is a new Transport. tr itself is
// only read. The copy gets its own TLS config (kafka-go sets ServerName
// on it) and, if tr recycles its connections before SASL sessions end,
// its own recycler bound to the copy, so the copy's connections are
// recycled too.
func WithMetadataTopics(tr *kafka.Transport, topics []string) *kafka.Transport {
	ts := slices.Compact(slices.Sorted(slices.Values(topics)))
	if ts == nil {
		ts = []string{} // nil would mean every topic
	}
	nt := &kafka.Transport{
		Dial:           tr.Dial,
		DialTimeout:    tr.DialTimeout,
		IdleTimeout:    tr.IdleTimeout,
		MetadataTTL:    tr.MetadataTTL,
		MetadataTopics: ts,
		ClientID:       tr.ClientID,
		SASL:           tr.SASL,
		Resolver:       tr.Resolver,
		Context:        tr.Context,
	}
	if tr.TLS != nil {
		nt.TLS = tr.TLS.Clone()
	}
	if r, ok := tr.SASL.(*rotator); ok {
		nt.SASL = newRotator(r.mech, r.lifetime, nt.CloseIdleConnections, r.recycled)
	}
	return nt
}
