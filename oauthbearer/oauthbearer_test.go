package oauthbearer

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func jwt(claims string) string {
	e := base64.RawURLEncoding.EncodeToString
	return e([]byte(`{"alg":"none"}`)) + "." + e([]byte(claims)) + "."
}

func TestInitialResponseBytes(t *testing.T) {
	got, err := InitialResponse("a.b.", nil)
	if err != nil || string(got) != "n,,\x01auth=Bearer a.b.\x01\x01" {
		t.Fatalf("%q, %v", got, err)
	}
	got, err = InitialResponse("tok", map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"})
	want := "n,,\x01auth=Bearer tok\x01identityPoolId=pool-2\x01logicalCluster=lkc-1\x01\x01"
	if err != nil || string(got) != want {
		t.Fatalf("%q, %v; want %q", got, err, want)
	}
}

func TestInitialResponseRejects(t *testing.T) {
	secret := "abc+def/="
	_, err := InitialResponse(secret, nil)
	if err == nil || strings.Contains(err.Error(), secret) {
		t.Fatalf("bad token: %v (must fail without quoting the token)", err)
	}
	if _, err := InitialResponse("", nil); err == nil {
		t.Fatal("empty token accepted")
	}
	for _, ext := range []map[string]string{{"auth": "x"}, {"a1": "x"}, {"a": ""}, {"a": "\x01"}, {"": "x"}} {
		if _, err := InitialResponse("t", ext); err == nil {
			t.Errorf("extensions %q accepted", ext)
		}
		if _, err := Mechanism(TokenProviderFunc(nil), ext); err == nil {
			t.Errorf("Mechanism accepted extensions %q", ext)
		}
	}
}

func TestMechanismStartAndNext(t *testing.T) {
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	m, err := Mechanism(TokenProviderFunc(func(context.Context) (Token, error) {
		return Token{Value: "t1", Expiry: exp, Extensions: map[string]string{"b": "tok"}}, nil
	}), map[string]string{"a": "cfg", "b": "cfg"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "OAUTHBEARER" {
		t.Fatal(m.Name())
	}
	sm, ir, err := m.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if string(ir) != "n,,\x01auth=Bearer t1\x01a=cfg\x01b=tok\x01\x01" {
		t.Fatalf("ir %q", ir)
	}
	if e, ok := sm.(Expirer); !ok || !e.SessionExpiry().Equal(exp) {
		t.Fatalf("state machine expiry: %v", sm)
	}
	if done, resp, err := sm.Next(context.Background(), nil); !done || resp != nil || err != nil {
		t.Fatalf("success: %v %q %v", done, resp, err)
	}
	// Failure: the broker's JSON error, answered with 0x01, then an error.
	sm, _, _ = m.Start(context.Background())
	done, resp, err := sm.Next(context.Background(), []byte(`{"status":"invalid_token"}`))
	if done || string(resp) != "\x01" || err != nil {
		t.Fatalf("first failure step: %v %q %v", done, resp, err)
	}
	if _, _, err := sm.Next(context.Background(), []byte(`{"status":"invalid_token"}`)); err == nil || !strings.Contains(err.Error(), "invalid_token") {
		t.Fatalf("second failure step: %v", err)
	}
	boom := errors.New("boom")
	m, _ = Mechanism(TokenProviderFunc(func(context.Context) (Token, error) { return Token{}, boom }), nil)
	if _, _, err := m.Start(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("provider error not wrapped: %v", err)
	}
}

func TestCachedRefreshesAtAFifthOfTheLifetime(t *testing.T) {
	now := time.Unix(1000, 0)
	var calls atomic.Int32
	p := Cached(TokenProviderFunc(func(context.Context) (Token, error) {
		n := calls.Add(1)
		return Token{Value: fmt.Sprint("t", n), Expiry: now.Add(100 * time.Second)}, nil
	}), 0).(*cache)
	p.now = func() time.Time { return now }
	get := func() string {
		tok, err := p.Token(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return tok.Value
	}
	if v := get(); v != "t1" {
		t.Fatal(v)
	}
	base := now
	now = base.Add(79 * time.Second)
	if v := get(); v != "t1" {
		t.Fatalf("refreshed with 21%% left: %s", v)
	}
	now = base.Add(81 * time.Second)
	if v := get(); v != "t2" {
		t.Fatalf("not refreshed with 19%% left: %s", v)
	}
	// Concurrent callers share the cached token.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { get() })
	}
	wg.Wait()
	if calls.Load() != 2 {
		t.Fatalf("%d provider calls, want 2", calls.Load())
	}
}

func TestCachedServesAValidTokenWhenARefreshFails(t *testing.T) {
	now := time.Unix(1000, 0)
	fail := false
	boom := errors.New("idp down")
	p := Cached(TokenProviderFunc(func(context.Context) (Token, error) {
		if fail {
			return Token{}, boom
		}
		return Token{Value: "t", Expiry: now.Add(100 * time.Second)}, nil
	}), 0).(*cache)
	p.now = func() time.Time { return now }
	if _, err := p.Token(context.Background()); err != nil {
		t.Fatal(err)
	}
	fail = true
	p.now = func() time.Time { return now.Add(90 * time.Second) }
	if tok, err := p.Token(context.Background()); err != nil || tok.Value != "t" {
		t.Fatalf("refresh failed with 10s left: %+v %v, want the cached token", tok, err)
	}
	p.now = func() time.Time { return now.Add(101 * time.Second) }
	if _, err := p.Token(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("expired token and a failed refresh: %v", err)
	}
}

func TestCachedWithoutExpiry(t *testing.T) {
	var calls int
	p := Cached(TokenProviderFunc(func(context.Context) (Token, error) { calls++; return Token{Value: "x"}, nil }), 0)
	p.Token(context.Background())
	p.Token(context.Background())
	if calls != 2 {
		t.Fatalf("no expiry, no noExpiry: %d calls, want 2 (ask every time)", calls)
	}
}

func TestTokenFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	p := TokenFile(path)
	if _, err := p.Token(context.Background()); err == nil {
		t.Fatal("missing file accepted")
	}
	tok := jwt(`{"sub":"relay","exp":2000000000}`)
	os.WriteFile(path, []byte(tok+"\n"), 0o600)
	got, err := p.Token(context.Background())
	if err != nil || got.Value != tok || !got.Expiry.Equal(time.Unix(2000000000, 0)) {
		t.Fatalf("%+v %v", got, err)
	}
	os.WriteFile(path, []byte("opaque"), 0o600) // re-read on every call
	got, err = p.Token(context.Background())
	if err != nil || got.Value != "opaque" || !got.Expiry.IsZero() {
		t.Fatalf("%+v %v", got, err)
	}
	os.WriteFile(path, []byte(" \n"), 0o600)
	if _, err := p.Token(context.Background()); err == nil {
		t.Fatal("empty file accepted")
	}
}

func TestJWTExpiry(t *testing.T) {
	for _, c := range []struct {
		tok  string
		want int64
		ok   bool
	}{
		{jwt(`{"exp":1700000000}`), 1700000000, true},
		{jwt(`{"exp":1700000000.5}`), 1700000000, true},
		{jwt(`{"sub":"x"}`), 0, false},
		{jwt(`{"exp":"soon"}`), 0, false},
		{jwt(`{"exp":-1}`), 0, false},
		{"abc", 0, false},
		{"a.!!.c", 0, false},
		{base64.StdEncoding.EncodeToString([]byte(`{}`)) + "." + base64.StdEncoding.EncodeToString([]byte(`{"exp":1700000001}`)) + ".", 1700000001, true},
	} {
		exp, ok := JWTExpiry(c.tok)
		if ok != c.ok || (ok && exp.Unix() != c.want) {
			t.Errorf("%q: %v %v, want %d %v", c.tok, exp, ok, c.want, c.ok)
		}
	}
}

func FuzzJWTExpiry(f *testing.F) {
	f.Add(jwt(`{"exp":1700000000}`))
	f.Add(jwt(`{"exp":1e300}`))
	f.Add("a..")
	f.Add("..")
	f.Fuzz(func(t *testing.T, tok string) {
		exp, ok := JWTExpiry(tok)
		if ok && (exp.Unix() <= 0 || exp.Unix() > 1<<40) {
			t.Fatalf("%q: exp %v out of range", tok, exp)
		}
		if !ok && !exp.IsZero() {
			t.Fatalf("%q: not ok but exp %v", tok, exp)
		}
	})
}

func TestClientCredentials(t *testing.T) {
	var got struct {
		user, pass, grant, scope, aud, ct string
	}
	var status = http.StatusOK
	var body = `{"access_token":"` + jwt(`{"exp":4000000000}`) + `","token_type":"Bearer","expires_in":300}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.user, got.pass, _ = r.BasicAuth()
		r.ParseForm()
		got.grant, got.scope, got.aud, got.ct = r.PostForm.Get("grant_type"), r.PostForm.Get("scope"), r.PostForm.Get("audience"), r.Header.Get("Content-Type")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	defer srv.Close()
	cc := &ClientCredentials{TokenURL: srv.URL, ClientID: "relay id", ClientSecret: "s3cr:et&", Scope: "kafka write",
		Params: map[string][]string{"audience": {"kafka"}}}
	start := time.Now()
	tok, err := cc.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got.user != "relay+id" || got.pass != "s3cr%3Aet%26" || got.grant != "client_credentials" || got.scope != "kafka write" ||
		got.aud != "kafka" || got.ct != "application/x-www-form-urlencoded" {
		t.Fatalf("request: %+v", got)
	}
	if d := tok.Expiry.Sub(start); d < 299*time.Second || d > 301*time.Second {
		t.Fatalf("expiry in %v, want 300s (expires_in, earlier than the JWT's exp)", d)
	}

	status, body = http.StatusUnauthorized, `{"error":"invalid_client","error_description":"bad secret"}`
	_, err = cc.Token(context.Background())
	var he *HTTPError
	if !errors.As(err, &he) || !he.Permanent() || he.Code != "invalid_client" || strings.Contains(err.Error(), "s3cr") {
		t.Fatalf("401: %v", err)
	}
	status, body = http.StatusServiceUnavailable, `oops`
	if _, err = cc.Token(context.Background()); !errors.As(err, &he) || he.Permanent() {
		t.Fatalf("503: %v", err)
	}
	status, body = http.StatusOK, `{"token_type":"Bearer"}`
	if _, err = cc.Token(context.Background()); err == nil {
		t.Fatal("no access_token accepted")
	}
	status, body = http.StatusOK, `{"access_token":"x","token_type":"mac"}`
	if _, err = cc.Token(context.Background()); err == nil {
		t.Fatal("token_type mac accepted")
	}
	status, body = http.StatusOK, `{"access_token":"opaque"}`
	cc.DefaultLifetime = time.Minute
	if tok, err = cc.Token(context.Background()); err != nil || tok.Expiry.IsZero() {
		t.Fatalf("default lifetime: %+v %v", tok, err)
	}
}

// TestClientCredentialsRefusesRedirects: a token endpoint's redirect is
// not followed, whatever its status and target (issue 46: the https-only
// rule checked the configured URL only, and a 307 to http re-sent
// client_id:secret in clear text; Go's client keeps the Authorization
// header on a redirect to the same host, and a 307 or 308 re-sends the
// form). The target, a plain-http server on the same host, must receive
// nothing.
func TestClientCredentialsRefusesRedirects(t *testing.T) {
	var reached atomic.Int32
	var leaked atomic.Value
	leaked.Store("")
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		if u, p, ok := r.BasicAuth(); ok {
			leaked.Store(u + ":" + p)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"stolen","token_type":"Bearer"}`)
	}))
	defer plain.Close()
	var status atomic.Int32
	var target atomic.Value
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"moved","token_type":"Bearer"}`)
			return
		}
		http.Redirect(w, r, target.Load().(string), int(status.Load()))
	}))
	defer tlsSrv.Close()

	for _, c := range []struct {
		status int
		target string
		want   string // the target as the error names it
	}{
		{http.StatusTemporaryRedirect, plain.URL + "/token?k=v", plain.URL + "/token"},
		{http.StatusPermanentRedirect, plain.URL + "/token", plain.URL + "/token"},
		{http.StatusFound, plain.URL + "/token", plain.URL + "/token"},
		{http.StatusMovedPermanently, plain.URL + "/token", plain.URL + "/token"},
		{http.StatusSeeOther, plain.URL + "/token", plain.URL + "/token"},
		// https to https, same host: refused as well; the configured
		// URL should name the endpoint.
		{http.StatusTemporaryRedirect, tlsSrv.URL + "/moved", tlsSrv.URL + "/moved"},
		{http.StatusTemporaryRedirect, "http://user:pw@" + strings.TrimPrefix(plain.URL, "http://") + "/t", plain.URL + "/t"},
	} {
		status.Store(int32(c.status))
		target.Store(c.target)
		cc := &ClientCredentials{TokenURL: tlsSrv.URL + "/token", ClientID: "relay", ClientSecret: "s3cret", HTTPClient: tlsSrv.Client()}
		tok, err := cc.Token(context.Background())
		var re *RedirectError
		switch {
		case !errors.As(err, &re) || re.Status != c.status || re.Location != c.want:
			t.Errorf("%d to %s: token %q, error %v; want a RedirectError naming %s", c.status, c.target, tok.Value, err, c.want)
		case strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "k=v") || strings.Contains(err.Error(), "pw"):
			t.Errorf("%d: the error shows the secret, the query or the user info: %v", c.status, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the plain-http target received %d requests (credentials %q), want none", n, leaked.Load())
	}

	// A caller's client that follows redirects is overridden, and left
	// as it was.
	status.Store(http.StatusTemporaryRedirect)
	target.Store(plain.URL + "/token")
	hc := tlsSrv.Client()
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return nil }
	cc := &ClientCredentials{TokenURL: tlsSrv.URL + "/token", ClientID: "relay", ClientSecret: "s3cret", HTTPClient: hc}
	if _, err := cc.Token(context.Background()); !errors.As(err, new(*RedirectError)) || reached.Load() != 0 {
		t.Errorf("a client with its own CheckRedirect: %v, %d requests to the target", err, reached.Load())
	}
	if hc.CheckRedirect == nil || hc.CheckRedirect(nil, nil) != nil {
		t.Error("the caller's client was changed")
	}
}
