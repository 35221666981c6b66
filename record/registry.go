package record

// This file holds where the registry formats' schemas live: the
// registry's address, credentials and cache bounds (issue 48).

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/fielderr"
)

// RegistryConfig is how the relay reaches the schema registry of the
// registry formats (Format.Registry), a Confluent-compatible API, and how
// many of its schemas it remembers. A zero field means its default
// (DefaultRegistryConfig). The encoders do no I/O and ignore it; the
// relay builds its registry client from it.
type RegistryConfig struct {
	// URL is the base of the Confluent-compatible API, e.g.
	// https://registry:8081 or, for Apicurio,
	// http://127.0.0.1:19081/apis/ccompat/v7. A user:password in it is
	// taken as Username and Password (what Confluent's clients call
	// basic.auth.credentials.source=URL) and never sent in the URL.
	URL string
	// Username and Password authenticate with HTTP basic auth (Confluent
	// Cloud's API key and secret). Token sends "Authorization: Bearer"
	// instead; set one of the two, not both.
	Username string
	Password string
	Token    string
	// TLS secures https URLs (root CAs, client certificates); nil means
	// the system's roots. It is cloned.
	TLS *tls.Config
	// Timeout bounds one request, connection included. A lookup that
	// times out is ErrTransient.
	Timeout time.Duration
	// CacheSize is how many schemas the cache keeps (by id and by
	// subject and version, each an entry), least recently used out first.
	CacheSize int
	// LatestTTL is how long a subject's "latest" version is trusted
	// before it is asked again. A numbered version and an id never change
	// once registered, so they stay until evicted; latest moves when a
	// version is registered. A stale latest is still served when the
	// refresh fails with ErrTransient.
	LatestTTL time.Duration
}

// DefaultRegistryConfig returns the defaults of every field, the values a
// zero field stands for.
func DefaultRegistryConfig() RegistryConfig {
	return RegistryConfig{Timeout: 10 * time.Second, CacheSize: 1000, LatestTTL: time.Minute}
}

// WithDefaults is c with every zero field set to its default.
func (c RegistryConfig) WithDefaults() RegistryConfig {
	d := DefaultRegistryConfig()
	def(&c.Timeout, d.Timeout)
	def(&c.CacheSize, d.CacheSize)
	def(&c.LatestTTL, d.LatestTTL)
	return c
}

// Validate checks c without I/O; the error joins one fielderr.Error per
// invalid field. The URL is never part of it when it holds a password.
func (c RegistryConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	bad := func(field string, value any, format string, args ...any) {
		errs = append(errs, &fielderr.Error{Field: field, Value: value, Err: fmt.Errorf(format, args...)})
	}
	if c.URL == "" {
		errs = append(errs, &fielderr.Error{Field: "URL", Err: fielderr.ErrRequired})
	} else if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad("URL", redactedURL(c.URL), "want http:// or https://host[:port][/path]")
	} else if _, has := u.User.Password(); has && c.Password != "" {
		bad("URL", u.Redacted(), "holds a password and so does Password: keep one")
	}
	if c.Token != "" && (c.Username != "" || c.Password != "" || hasUserinfo(c.URL)) {
		bad("Token", nil, "is set with basic auth credentials (Username, Password or the URL's): keep one")
	}
	if c.Password != "" && c.Username == "" && !hasUserinfo(c.URL) {
		bad("Username", nil, "is empty while Password is set")
	}
	if c.Timeout < 0 {
		bad("Timeout", c.Timeout, "must be positive")
	}
	if c.CacheSize < 0 {
		bad("CacheSize", c.CacheSize, "must be positive")
	}
	if c.LatestTTL < 0 {
		bad("LatestTTL", c.LatestTTL, "must be positive")
	}
	return errors.Join(errs...)
}

func hasUserinfo(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.User != nil
}

// redactedURL is raw without its password, or a placeholder when raw
// does not even parse (it might still hold one).
func redactedURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	if strings.Contains(raw, "@") {
		return "(unparsable URL with userinfo)"
	}
	return raw
}

func def[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}
