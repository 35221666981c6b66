package kafkaconn

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/internal/loopback"
	"github.com/outbox-relay/outbox-relay/oauthbearer"
)

// build checks c and returns the OAUTHBEARER mechanism it describes.
func (c OAuthConfig) build() (sasl.Mechanism, []error) {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, &SettingError{Field: "SASL.OAuth." + field, Err: fmt.Errorf(format, args...)})
	}
	ext, err := ParseExtensions(c.Extensions)
	if err != nil {
		fail("Extensions", "%w", err)
	}
	var p oauthbearer.TokenProvider
	switch {
	case c.TokenFile != "" && c.TokenEndpoint != "":
		fail("TokenFile", "set a token file or a token endpoint, not both")
	case c.TokenFile != "":
		if c.ClientID != "" || c.ClientSecret != "" || c.Scope != "" {
			fail("ClientID", "a client id, secret or scope is only used with a token endpoint")
		}
		// Re-read at every new connection: the file is the cache.
		p = oauthbearer.TokenFile(c.TokenFile)
	case c.TokenEndpoint != "":
		u, err := url.Parse(c.TokenEndpoint)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			fail("TokenEndpoint", "token endpoint must be an http(s) URL")
		case u.Scheme == "http" && !loopback.Host(u.Hostname()):
			// The grant sends the client secret in the request.
			fail("TokenEndpoint", "token endpoint %s://%s would receive the client secret in clear text: use https (http only on a loopback address)",
				u.Scheme, u.Host)
		}
		if c.ClientID == "" {
			fail("ClientID", "the client-credentials grant needs a client id")
		}
		if c.ClientSecret == "" {
			fail("ClientSecret", "the client-credentials grant needs a client secret")
		}
		// A token without a known expiry is fetched anew for every
		// connection rather than kept past its unknown end.
		p = oauthbearer.Cached(&oauthbearer.ClientCredentials{
			TokenURL: c.TokenEndpoint, ClientID: c.ClientID, ClientSecret: c.ClientSecret, Scope: c.Scope,
		}, 0)
	default:
		fail("TokenFile", "OAUTHBEARER needs a token file or a token endpoint")
	}
	if len(errs) > 0 {
		return nil, errs
	}
	m, err := oauthbearer.Mechanism(p, ext)
	if err != nil {
		return nil, []error{&SettingError{Field: "SASL.OAuth.Extensions", Err: err}}
	}
	return m, nil
}

// ParseExtensions parses "key=value,key2=value2" (empty: none) and checks
// the pairs against Kafka's rules.
func ParseExtensions(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	ext := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("extension %q is not key=value", kv)
		}
		if _, dup := ext[k]; dup {
			return nil, fmt.Errorf("extension %s given twice", k)
		}
		ext[k] = v
	}
	if err := oauthbearer.CheckExtensions(ext); err != nil {
		return nil, err
	}
	return ext, nil
}
