package oauthbearer

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/secretfile"
)

// TokenFile returns a TokenProvider that reads the token from path on
// every call (each new broker connection): a sidecar, a Kubernetes
// projected volume or a cron job keeps the file fresh, and the relay picks
// the new token up without a restart. The file is read by the rules of
// every secret file: at most 64 KiB, trailing line endings dropped, never
// empty.
// The expiry is the JWT's exp claim when the token is a JWT with one
// (decoded, not verified: the broker verifies), otherwise unknown.
func TokenFile(path string) TokenProvider {
	return TokenProviderFunc(func(context.Context) (Token, error) {
		v, err := secretfile.Read(path)
		if err != nil {
			return Token{}, fmt.Errorf("oauthbearer: read token file: %w", err)
		}
		if strings.ContainsAny(v, " \t\r\n") {
			// A bearer token (RFC 6750's b64token) has no white space:
			// this is another file, or two tokens.
			return Token{}, fmt.Errorf("oauthbearer: token file %s holds white space, which no token has", path)
		}
		exp, _ := JWTExpiry(v)
		return Token{Value: v, Expiry: exp}, nil
	})
}

// JWTExpiry returns the exp claim (seconds since the epoch, RFC 7519
// §4.1.4) of a JWS compact serialization, without verifying the token.
// ok is false when token is not a JWT or has no numeric exp.
func JWTExpiry(token string) (exp time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	// base64url without padding (RFC 7515); tolerate padding and the
	// standard alphabet, which unsecured test tokens use.
	seg := strings.TrimRight(parts[1], "=")
	seg = strings.NewReplacer("+", "-", "/", "_").Replace(seg)
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp *json.Number `json:"exp"`
	}
	if err := json.Unmarshal(raw, &claims); err != nil || claims.Exp == nil {
		return time.Time{}, false
	}
	f, err := claims.Exp.Float64()
	if err != nil || math.IsNaN(f) || f <= 0 || f > 1<<40 {
		return time.Time{}, false
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)), true
}

// ClientCredentials is the OAuth 2.0 client-credentials grant (RFC 6749
// §4.4): the relay authenticates to the identity provider as a client and
// gets an access token for Kafka. Hand-written (one form POST) rather
// than golang.org/x/oauth2, to keep the module graph of the relay and of
// every embedder unchanged. Use it through Cached: each call requests a
// new token.
type ClientCredentials struct {
	// TokenURL is the identity provider's token endpoint.
	TokenURL string
	// ClientID and ClientSecret authenticate the client with HTTP Basic
	// (client_secret_basic, which RFC 6749 §2.3.1 requires every
	// provider to support).
	ClientID, ClientSecret string
	// Scope is the space-separated scope to ask for; empty asks for the
	// client's default.
	Scope string
	// Params are extra form parameters (e.g. audience).
	Params url.Values
	// HTTPClient defaults to a client with a 30 s timeout. Token uses a
	// copy that follows no redirect, whatever CheckRedirect says: a
	// redirect is a *RedirectError.
	HTTPClient *http.Client
	// DefaultLifetime is the lifetime of a token whose response has no
	// expires_in; zero means unknown.
	DefaultLifetime time.Duration
}

// Token requests a token. The error names the endpoint's OAuth error code
// and description (RFC 6749 §5.2), never the secret or a token; an
// *HTTPError tells a rejected client (4xx) from an unreachable or failing
// endpoint; a *RedirectError is a redirect, never followed.
func (c *ClientCredentials) Token(ctx context.Context) (Token, error) {
	form := url.Values{}
	for k, v := range c.Params {
		form[k] = v
	}
	form.Set("grant_type", "client_credentials")
	if c.Scope != "" {
		form.Set("scope", c.Scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, fmt.Errorf("oauthbearer: token request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// RFC 6749 §2.3.1: both form-urlencoded before Basic encoding.
	req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	// A copy of the caller's client that follows no redirect: the
	// https-only rule was checked on TokenURL, not on where it points.
	hc := http.Client{Timeout: 30 * time.Second}
	if c.HTTPClient != nil {
		hc = *c.HTTPClient
	}
	var redirect *url.URL
	hc.CheckRedirect = func(next *http.Request, _ []*http.Request) error {
		redirect = next.URL
		return http.ErrUseLastResponse
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: %w", redactURLError(err))
	}
	defer resp.Body.Close()
	if redirect != nil {
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: %w", &RedirectError{Status: resp.StatusCode, Location: redactURL(redirect)})
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: read response: %w", err)
	}
	var r struct {
		AccessToken string       `json:"access_token"`
		TokenType   string       `json:"token_type"`
		ExpiresIn   *json.Number `json:"expires_in"`
		Error       string       `json:"error"`
		Description string       `json:"error_description"`
	}
	jsonErr := json.Unmarshal(body, &r)
	if resp.StatusCode != http.StatusOK {
		e := &HTTPError{Status: resp.StatusCode, Code: r.Error, Description: r.Description}
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: %w", e)
	}
	if jsonErr != nil {
		ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: response (%s) is not JSON: %w", ct, jsonErr)
	}
	if r.AccessToken == "" {
		return Token{}, errors.New("oauthbearer: token endpoint: the response has no access_token")
	}
	if r.TokenType != "" && !strings.EqualFold(r.TokenType, "bearer") {
		return Token{}, fmt.Errorf("oauthbearer: token endpoint: token_type %q, want Bearer", r.TokenType)
	}
	tok := Token{Value: r.AccessToken}
	if r.ExpiresIn != nil {
		if s, err := r.ExpiresIn.Float64(); err == nil && s > 0 {
			tok.Expiry = start.Add(time.Duration(s * float64(time.Second)))
		}
	}
	if exp, ok := JWTExpiry(r.AccessToken); ok && (tok.Expiry.IsZero() || exp.Before(tok.Expiry)) {
		tok.Expiry = exp
	}
	if tok.Expiry.IsZero() && c.DefaultLifetime > 0 {
		tok.Expiry = start.Add(c.DefaultLifetime)
	}
	return tok, nil
}

// HTTPError is a token endpoint's refusal. A 4xx (Permanent) means the
// client id, secret or scope is wrong and retrying cannot help; a 5xx
// may pass.
type HTTPError struct {
	Status      int
	Code        string // RFC 6749 §5.2 error, e.g. invalid_client
	Description string
}

// Error gives the status and the OAuth error; the endpoint's response
// never holds the client secret.
func (e *HTTPError) Error() string {
	s := fmt.Sprintf("HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Description != "" {
		s += ": " + e.Description
	}
	return s
}

// Permanent reports whether the endpoint rejected the request itself
// (4xx other than 408 and 429).
func (e *HTTPError) Permanent() bool {
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout && e.Status != http.StatusTooManyRequests
}

// RedirectError is a token endpoint's redirect, which Token does not
// follow: following it would send the client secret again, to a URL that
// was never checked (an https endpoint redirecting to http would have it
// cross the network in clear text; Go's client keeps the Authorization
// header on a redirect to the same host, and a 307 or 308 re-sends the
// request as it was). A token endpoint has no reason to redirect a
// client's POST: configure the URL it redirects to, once checked.
type RedirectError struct {
	Status int
	// Location is the redirect's target without user info, query or
	// fragment, which may carry secrets.
	Location string
}

// Error names the status and the target.
func (e *RedirectError) Error() string {
	return fmt.Sprintf("HTTP %d redirect to %s, not followed (it would send the client secret again): set the token URL to the endpoint itself", e.Status, e.Location)
}

// redactURL is u without user info, query or fragment.
func redactURL(u *url.URL) string {
	r := *u
	r.User, r.RawQuery, r.ForceQuery, r.Fragment, r.RawFragment = nil, "", false, "", ""
	return r.String()
}

// redactURLError drops the URL's user info and query from a *url.Error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			u.User, u.RawQuery = nil, ""
			ue.URL = u.String()
		}
	}
	return err
}
