// Package oauthbearer is a SASL/OAUTHBEARER mechanism for kafka-go
// (RFC 7628 as Apache Kafka implements it, KIP-255), with the token
// providers the relay's command line offers: a token file and the OAuth
// 2.0 client-credentials grant.
//
// kafka-go ships PLAIN and SCRAM only, while Confluent Cloud identity
// pools, Redpanda OIDC and self-managed Kafka with an identity provider
// authenticate clients with bearer tokens. Mechanism turns any
// TokenProvider into a sasl.Mechanism for relay.KafkaConfig.SASL, a
// kafka.Transport or a kafka.Dialer (the inbox's, via
// inbox.Config.TuneReader).
//
// kafka-go never re-authenticates a connection (KIP-368), and a broker
// closes a connection at its first request after the session ends (at the
// token's expiry, or after connections.max.reauth.ms). The StateMachine
// that Mechanism's Start returns therefore reports the token's expiry
// (Expirer), so that the owner of a kafka.Transport can recycle its
// connections before that; relay.KafkaConfig's Transport does.
package oauthbearer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/segmentio/kafka-go/sasl"
)

// Name is the SASL mechanism name, as Kafka's sasl.enabled.mechanisms
// spells it.
const Name = "OAUTHBEARER"

// Token is a bearer token and what the broker needs beside it.
type Token struct {
	// Value is the token itself (for Kafka, a JWT: three base64url parts
	// separated by dots). It is a secret: never log it.
	Value string
	// Expiry is when the token stops being valid; zero means unknown.
	// The broker ends the session at that time, so connections must be
	// replaced before it.
	Expiry time.Time
	// Extensions are SASL extensions sent with the token (RFC 7628 §3.1),
	// e.g. Confluent Cloud's logicalCluster and identityPoolId. Keys are
	// letters only; "auth" is reserved.
	Extensions map[string]string
}

// TokenProvider returns the token for a new broker connection. Mechanism
// calls it once per connection (per SASL handshake), from many goroutines
// at once; wrap slow providers in Cached.
type TokenProvider interface {
	Token(ctx context.Context) (Token, error)
}

// TokenProviderFunc adapts a function to TokenProvider, e.g. one that
// asks a cloud SDK for a token.
type TokenProviderFunc func(ctx context.Context) (Token, error)

// Token calls f.
func (f TokenProviderFunc) Token(ctx context.Context) (Token, error) { return f(ctx) }

// Expirer is implemented by the sasl.StateMachine that Mechanism's Start
// returns: SessionExpiry is the expiry of the token that handshake sends
// (zero when unknown). kafka-go does not re-authenticate, so a client
// that keeps connections open must close them before this time; the
// relay's Transports do (internal/kafkaconn).
type Expirer interface {
	SessionExpiry() time.Time
}

// Mechanism returns a sasl.Mechanism named OAUTHBEARER that sends p's
// token with extensions (merged under the token's own, which win). The
// extensions are checked here, so a bad key fails at start-up rather than
// at every handshake.
func Mechanism(p TokenProvider, extensions map[string]string) (sasl.Mechanism, error) {
	if p == nil {
		return nil, errors.New("oauthbearer: no token provider")
	}
	if err := CheckExtensions(extensions); err != nil {
		return nil, err
	}
	return &mechanism{p: p, ext: extensions}, nil
}

type mechanism struct {
	p   TokenProvider
	ext map[string]string
}

func (m *mechanism) Name() string { return Name }

// Start gets a token and builds the client's first message; the token is
// never part of an error.
func (m *mechanism) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	tok, err := m.p.Token(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("oauthbearer: get token: %w", err)
	}
	ext := m.ext
	if len(tok.Extensions) > 0 {
		ext = make(map[string]string, len(m.ext)+len(tok.Extensions))
		for k, v := range m.ext {
			ext[k] = v
		}
		for k, v := range tok.Extensions {
			ext[k] = v
		}
	}
	ir, err := InitialResponse(tok.Value, ext)
	if err != nil {
		return nil, nil, err
	}
	return &session{expiry: tok.Expiry}, ir, nil
}

var (
	tokenRE  = regexp.MustCompile(`^[-_.a-zA-Z0-9]+$`)
	extKeyRE = regexp.MustCompile(`^[A-Za-z]+$`)
	extValRE = regexp.MustCompile(`^[\x21-\x7E \t\r\n]+$`)
)

// CheckExtensions applies Kafka's rules for SASL extensions
// (OAuthBearerClientInitialResponse): keys are letters, "auth" is
// reserved, values are printable ASCII, spaces, tabs or line breaks.
func CheckExtensions(ext map[string]string) error {
	for _, k := range sortedKeys(ext) {
		switch {
		case !extKeyRE.MatchString(k):
			return fmt.Errorf("oauthbearer: extension key %q: only letters are allowed", k)
		case k == "auth":
			return errors.New(`oauthbearer: extension key "auth" is reserved`)
		case !extValRE.MatchString(ext[k]):
			return fmt.Errorf("oauthbearer: extension %s: the value must be non-empty printable ASCII", k)
		}
	}
	return nil
}

// InitialResponse is the client's first OAUTHBEARER message:
// "n,,\x01auth=Bearer <token>\x01" then "key=value\x01" per extension
// (sorted by key) and a final "\x01". The token must match Kafka's
// [-_.a-zA-Z0-9]+; the error never quotes it.
func InitialResponse(token string, ext map[string]string) ([]byte, error) {
	if !tokenRE.MatchString(token) {
		return nil, fmt.Errorf("oauthbearer: the token (%d bytes) is empty or holds characters other than letters, digits, '-', '_' and '.' (Kafka accepts only those)", len(token))
	}
	if err := CheckExtensions(ext); err != nil {
		return nil, err
	}
	var b strings.Builder
	b.WriteString("n,,\x01auth=Bearer ")
	b.WriteString(token)
	b.WriteByte(1)
	for _, k := range sortedKeys(ext) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(ext[k])
		b.WriteByte(1)
	}
	b.WriteByte(1)
	return []byte(b.String()), nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// session is one handshake. Kafka answers a good token with an empty
// challenge; a rejected one with a JSON error document, to which RFC 7628
// §3.2.3 has the client answer a single 0x01, after which the broker fails
// the exchange (SASL_AUTHENTICATION_FAILED, carrying the document).
type session struct {
	expiry time.Time
	failed bool
}

func (s *session) SessionExpiry() time.Time { return s.expiry }

func (s *session) Next(_ context.Context, challenge []byte) (bool, []byte, error) {
	if len(challenge) == 0 {
		return true, nil, nil
	}
	if s.failed {
		return false, nil, fmt.Errorf("oauthbearer: the broker rejected the token: %s", challenge)
	}
	s.failed = true
	return false, []byte{1}, nil
}

// Cached returns a TokenProvider that asks p for a token only when the
// cached one has less than a fifth of its lifetime left (or has no
// expiry and is older than noExpiry; zero means asking every time), so a
// handshake always sends a token with most of its life ahead: the
// broker's session ends at the token's expiry. Concurrent callers share
// one refresh. When a refresh fails while the cached token has not
// expired yet, the cached token is returned (an identity provider's
// hiccup must not fail new connections that a valid token can still
// open) and the next call tries again; once it has expired, the error is.
func Cached(p TokenProvider, noExpiry time.Duration) TokenProvider {
	return &cache{p: p, noExpiry: noExpiry, now: time.Now}
}

type cache struct {
	p        TokenProvider
	noExpiry time.Duration
	now      func() time.Time

	mu      sync.Mutex
	tok     Token
	fetched time.Time
	ok      bool
}

func (c *cache) Token(ctx context.Context) (Token, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	if c.ok && c.fresh(now) {
		return c.tok, nil
	}
	tok, err := c.p.Token(ctx)
	if err != nil {
		if c.ok && !c.tok.Expiry.IsZero() && now.Before(c.tok.Expiry) {
			return c.tok, nil
		}
		return Token{}, err
	}
	c.tok, c.fetched, c.ok = tok, now, true
	c.tok.Extensions = maps.Clone(tok.Extensions)
	return c.tok, nil
}

func (c *cache) fresh(now time.Time) bool {
	if c.tok.Expiry.IsZero() {
		return c.noExpiry > 0 && now.Sub(c.fetched) < c.noExpiry
	}
	life := c.tok.Expiry.Sub(c.fetched)
	return c.tok.Expiry.Sub(now) > life/5
}
