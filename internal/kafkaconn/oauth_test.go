package kafkaconn

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/oauthbearer"
)

func TestBuildOAuthBearer(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("a.b.\n"), 0o600)
	ok := func(c SASLConfig) Security {
		t.Helper()
		s, err := Config{SASL: c}.Build()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		return s
	}
	s := ok(SASLConfig{Mechanism: "oauthbearer", OAuth: OAuthConfig{TokenFile: file, Extensions: "logicalCluster=lkc-1, identityPoolId=pool-2"}, SessionLifetime: time.Minute})
	if s.SASL.Name() != "OAUTHBEARER" || s.SessionLifetime != time.Minute || s.Describe() != "SASL_PLAINTEXT (OAUTHBEARER)" {
		t.Fatalf("%+v %s", s, s.Describe())
	}
	_, ir, err := s.SASL.Start(context.Background())
	if err != nil || string(ir) != "n,,\x01auth=Bearer a.b.\x01identityPoolId=pool-2\x01logicalCluster=lkc-1\x01\x01" {
		t.Fatalf("%q %v", ir, err)
	}
	ok(SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenEndpoint: "https://idp.example/token", ClientID: "c", ClientSecret: "s", Scope: "kafka"}})

	for _, c := range []struct {
		cfg   SASLConfig
		field string
		msg   string
	}{
		{SASLConfig{Mechanism: "OAUTHBEARER"}, "SASL.OAuth.TokenFile", "needs a token file or a token endpoint"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenFile: file, TokenEndpoint: "https://x/t"}}, "SASL.OAuth.TokenFile", "not both"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenEndpoint: "https://x/t", ClientSecret: "s"}}, "SASL.OAuth.ClientID", "client id"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenEndpoint: "https://x/t", ClientID: "c"}}, "SASL.OAuth.ClientSecret", "client secret"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenEndpoint: "ftp://x/t", ClientID: "c", ClientSecret: "s"}}, "SASL.OAuth.TokenEndpoint", "http(s) URL"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenFile: file, ClientID: "c"}}, "SASL.OAuth.ClientID", "only used with a token endpoint"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenFile: file, Extensions: "auth=x"}}, "SASL.OAuth.Extensions", "reserved"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenFile: file, Extensions: "novalue"}}, "SASL.OAuth.Extensions", "not key=value"},
		{SASLConfig{Mechanism: "OAUTHBEARER", OAuth: OAuthConfig{TokenFile: file, Extensions: "a=1,a=2"}}, "SASL.OAuth.Extensions", "twice"},
		{SASLConfig{Mechanism: "OAUTHBEARER", Username: "u", OAuth: OAuthConfig{TokenFile: file}}, "SASL.Username", "no username"},
		{SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p", OAuth: OAuthConfig{TokenFile: file}}, "SASL.Mechanism", "use OAUTHBEARER"},
		{SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "p", SessionLifetime: time.Second}, "SASL.SessionLifetime", "under 5s"},
		{SASLConfig{SessionLifetime: -time.Second}, "SASL.SessionLifetime", "negative"},
	} {
		_, err := Config{SASL: c.cfg}.Build()
		var fe *SettingError
		if !errors.As(err, &fe) || fe.Field != c.field || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: %v; want a %s error with %q", c.cfg, err, c.field, c.msg)
		}
	}
}

func TestClassifyTokenEndpointRefusal(t *testing.T) {
	err := fmt.Errorf("dial: %w", fmt.Errorf("oauthbearer: get token: %w", &oauthbearer.HTTPError{Status: 401, Code: "invalid_client"}))
	if f := Classify(err); f != FailureSASLToken {
		t.Fatalf("401: %q", f)
	}
	if f := Classify(&oauthbearer.HTTPError{Status: 503}); f != FailureNone {
		t.Fatalf("503: %q, want transient", f)
	}
	// Issue 46: a redirect is not followed; the configured URL is wrong.
	err = fmt.Errorf("oauthbearer: get token: %w", &oauthbearer.RedirectError{Status: 307, Location: "http://idp/token"})
	if f := Classify(err); f != FailureSASLTokenRedirect {
		t.Fatalf("redirect: %q", f)
	}
}

type fakeMech struct{ expiry time.Time }

type fakeSM struct{ expiry time.Time }

func (fakeSM) Next(context.Context, []byte) (bool, []byte, error) { return true, nil, nil }
func (s fakeSM) SessionExpiry() time.Time                         { return s.expiry }

func (m *fakeMech) Name() string { return "FAKE" }
func (m *fakeMech) Start(context.Context) (sasl.StateMachine, []byte, error) {
	return fakeSM{m.expiry}, []byte("x"), nil
}

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (t *fakeTimer) Stop() bool { t.stopped = true; return true }

func TestRotatorSchedulesBeforeTheEarliestSessionEnd(t *testing.T) {
	now := time.Unix(1000, 0)
	mech := &fakeMech{}
	var mu sync.Mutex
	var closes int
	var ends []time.Time
	var timers []*fakeTimer
	r := newRotator(mech, 100*time.Second, func() { mu.Lock(); closes++; mu.Unlock() }, func(e time.Time) { ends = append(ends, e) })
	r.now = func() time.Time { return now }
	r.afterFunc = func(d time.Duration, f func()) stopper {
		ft := &fakeTimer{d: d, f: f}
		timers = append(timers, ft)
		return ft
	}
	start := func() {
		t.Helper()
		if _, _, err := r.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	// No token expiry: the configured lifetime, 80 % of it.
	start()
	if len(timers) != 1 || timers[0].d != 80*time.Second {
		t.Fatalf("timers %+v", timers)
	}
	// A later connection whose session ends after the pending recycle: no new timer.
	now = now.Add(10 * time.Second)
	start()
	if len(timers) != 1 {
		t.Fatalf("a second timer for a later session: %d", len(timers))
	}
	// A token expiring in 50 s: sooner, so the timer moves to 40 s.
	mech.expiry = now.Add(50 * time.Second)
	start()
	if len(timers) != 2 || !timers[0].stopped || timers[1].d != 40*time.Second {
		t.Fatalf("timers %+v %+v", timers[0], timers[len(timers)-1])
	}
	timers[1].f()
	if closes != 1 || len(ends) != 1 || !ends[0].Equal(mech.expiry) {
		t.Fatalf("closes %d ends %v", closes, ends)
	}
	// The stopped timer firing late clears nothing and no timer is pending.
	if r.timer != nil {
		t.Fatal("timer still pending after firing")
	}
	// A token about to expire: at least a second.
	mech.expiry = now.Add(100 * time.Millisecond)
	start()
	if got := timers[len(timers)-1].d; got != time.Second {
		t.Fatalf("delay %v, want the 1s floor", got)
	}
}

func TestTransportRotatesOnlyWithSASL(t *testing.T) {
	if tr := (Security{}).Transport("c", time.Second, time.Second); tr.SASL != nil {
		t.Fatal("SASL without a mechanism")
	}
	tr := (Security{SASL: &fakeMech{}, SessionLifetime: time.Minute}).Transport("c", time.Second, time.Second)
	r, ok := tr.SASL.(*rotator)
	if !ok || r.Name() != "FAKE" || r.lifetime != time.Minute {
		t.Fatalf("%T", tr.SASL)
	}
}
