//go:build integration

package integration

import (
	"context"
	"encoding/base64"
	"encoding/json"
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

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"

	"github.com/outbox-relay/outbox-relay/inbox"
	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/oauthbearer"
	"github.com/outbox-relay/outbox-relay/record"
)

// oauthReauth is the OAuth listener's connections.max.reauth.ms in
// TestKafkaOAuthBearer; the tokens live longer (oauthTokenLife), so both
// ends of a session occur: the reauth limit and the token's expiry.
const (
	oauthReauth    = 8 * time.Second
	oauthTokenLife = 12 * time.Second
)

// unsecuredToken is an unsigned JWS (RFC 7515 A.5) that Kafka's
// OAuthBearerUnsecuredValidatorCallbackHandler accepts: header
// {"alg":"none"}, claims with sub, iat and exp, empty signature. The
// validator decodes with Java's standard Base64 decoder while the SASL
// parser admits only [-_.a-zA-Z0-9], so each part must be letters and
// digits only: the claims are padded with spaces until they encode so.
func unsecuredToken(t testing.TB, sub string, life time.Duration) string {
	t.Helper()
	now := time.Now()
	enc := func(s string) string {
		for pad := 0; pad < 64; pad++ {
			js := strings.Replace(s, "}", strings.Repeat(" ", pad)+"}", 1)
			e := base64.RawStdEncoding.EncodeToString([]byte(js))
			if !strings.ContainsAny(e, "+/") {
				return e
			}
		}
		t.Fatalf("no alphanumeric encoding of %s", s)
		return ""
	}
	claims := fmt.Sprintf(`{"sub":%q,"iat":%d,"exp":%d}`, sub, now.Unix(), now.Add(life).Unix())
	return enc(`{"alg":"none"}`) + "." + enc(claims) + "."
}

// countingProvider records every token a mechanism sent (one per SASL
// handshake, i.e. per new connection).
type countingProvider struct {
	p          oauthbearer.TokenProvider
	handshakes atomic.Int64
	mu         sync.Mutex
	tokens     map[string]bool
}

func (c *countingProvider) Token(ctx context.Context) (oauthbearer.Token, error) {
	tok, err := c.p.Token(ctx)
	if err == nil {
		c.handshakes.Add(1)
		c.mu.Lock()
		c.tokens[tok.Value] = true
		c.mu.Unlock()
	}
	return tok, err
}

func (c *countingProvider) distinct() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.tokens) }

// TestKafkaOAuthBearer runs the relay (client-credentials grant against a
// token endpoint in this test) and an inbox (token file rewritten during
// the test) over SASL/OAUTHBEARER against Kafka's unsecured JWS validator,
// with tokens that live 12 s and sessions cut at 8 s
// (connections.max.reauth.ms), for about 40 s of load. Every committed
// event must reach Kafka and be applied by the inbox exactly once, in
// aggregate order, while several tokens are used and connections are
// replaced many times. First it checks what the design relies on: the
// broker really ends sessions (at connections.max.reauth.ms, and at the
// token's expiry without it), so a client that kept its connections would
// fail.
func TestKafkaOAuthBearer(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	t0 := time.Now()
	pki := newSecurePKI(t)
	k := startSecureKafkaWith(t, pki, secureKafkaOptions{OAuth: true, OAuthReauth: oauthReauth})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	env := NewEnv(t, EnvOptions{NoTopic: true, Partitions: 3})
	env.Brokers = []string{k.OAuthAddr}
	// The topic, made by the SCRAM user on the SASL_SSL listener.
	admin := k.client(k.security(t, kafkaconn.MechanismSCRAMSHA512))
	if res, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: env.Topic, NumPartitions: 3, ReplicationFactor: 1}}}); err != nil || res.Errors[env.Topic] != nil {
		t.Fatalf("create topic: %v %v", err, res)
	}

	t.Run("BrokerEndsSessions", func(t *testing.T) {
		// Three kafka.Conns that never reconnect, idle past the session
		// end, then one request each.
		check := func(addr string, life, idle time.Duration, wantFail bool) func() error {
			tok := unsecuredToken(t, "probe", life)
			m, err := oauthbearer.Mechanism(oauthbearer.TokenProviderFunc(func(context.Context) (oauthbearer.Token, error) {
				return oauthbearer.Token{Value: tok}, nil
			}), nil)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := (&kafka.Dialer{Timeout: 5 * time.Second, SASLMechanism: m}).DialContext(ctx, "tcp", addr)
			if err != nil {
				t.Fatalf("dial %s with a fresh token: %v", addr, err)
			}
			if _, err := conn.ReadPartitions(env.Topic); err != nil {
				t.Fatalf("first request on %s: %v", addr, err)
			}
			return func() error {
				defer conn.Close()
				// wall-clock: idle past the session's end (reauth or token expiry): the broker acts on time
				time.Sleep(idle)
				conn.SetDeadline(time.Now().Add(5 * time.Second))
				_, err := conn.ReadPartitions(env.Topic)
				if (err != nil) != wantFail {
					return fmt.Errorf("%s, token for %s, request after %s: error %v, want failure %v", addr, life, idle, err, wantFail)
				}
				t.Logf("%s, token for %s, request after %s: %v", addr, life, idle, err)
				return nil
			}
		}
		probes := []func() error{
			check(k.OAuthAddr, time.Minute, oauthReauth+time.Second, true),         // connections.max.reauth.ms
			check(k.OAuthNoReauthAddr, 5*time.Second, 6500*time.Millisecond, true), // the token's exp, without reauth set
			check(k.OAuthNoReauthAddr, time.Minute, 6500*time.Millisecond, false),  // control: the session lives on
		}
		errs := make(chan error, len(probes))
		for _, p := range probes {
			go func() { errs <- p() }()
		}
		for range probes {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		// A rejected token fails the handshake with SASL_AUTHENTICATION_FAILED.
		expired := unsecuredToken(t, "probe", -time.Minute)
		m, _ := oauthbearer.Mechanism(oauthbearer.TokenProviderFunc(func(context.Context) (oauthbearer.Token, error) {
			return oauthbearer.Token{Value: expired}, nil
		}), nil)
		_, err := (&kafka.Dialer{Timeout: 5 * time.Second, SASLMechanism: m}).DialContext(ctx, "tcp", k.OAuthAddr)
		if kafkaconn.Classify(err) != kafkaconn.FailureSASLAuthentication {
			t.Errorf("expired token: %v (class %q), want a SASL authentication failure", err, kafkaconn.Classify(err))
		} else {
			t.Logf("expired token refused: %v", err)
		}
	})
	if t.Failed() {
		return
	}

	// The relay's token endpoint: client credentials, a new 12 s token per grant.
	const clientID, clientSecret = "outbox-relay", "cc-secret-0123"
	var grants atomic.Int64
	var badGrants atomic.Int64
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		_ = r.ParseForm()
		if !ok || id != clientID || secret != clientSecret || r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != "kafka" {
			badGrants.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		grants.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": unsecuredToken(t, "relay", oauthTokenLife),
			"token_type": "Bearer", "expires_in": int(oauthTokenLife.Seconds())})
	}))
	defer idp.Close()
	secretFile := filepath.Join(t.TempDir(), "client-secret")
	if err := os.WriteFile(secretFile, []byte(clientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env.Migrate()
	relayEnv := func(overrides ...string) []string {
		return processEnv(env.BaseEnv(), []string{
			"OUTBOX_RELAY_KAFKA_SASL_MECHANISM=OAUTHBEARER",
			"OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT=" + idp.URL + "/token",
			"OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_ID=" + clientID,
			"OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET_FILE=" + secretFile,
			"OUTBOX_RELAY_KAFKA_SASL_OAUTH_SCOPE=kafka",
			"OUTBOX_RELAY_KAFKA_SASL_OAUTH_EXTENSIONS=logicalCluster=lkc-it,identityPoolId=pool-it",
			fmt.Sprintf("OUTBOX_RELAY_KAFKA_SASL_SESSION_LIFETIME=%s", oauthReauth),
			"OUTBOX_RELAY_HEARTBEAT_INTERVAL=1s",
			"OUTBOX_RELAY_BACKOFF_MAX=1s",
			"OUTBOX_RELAY_METRICS_ADDR=",
		}, overrides)
	}
	t.Run("RefusesWrongClientSecret", func(t *testing.T) {
		wrong := filepath.Join(t.TempDir(), "wrong-secret")
		if err := os.WriteFile(wrong, []byte("not-"+clientSecret), 0o600); err != nil {
			t.Fatal(err)
		}
		relay := StartRelay(t, relayEnv("OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET_FILE="+wrong))
		code, exited := relay.Wait(30 * time.Second)
		if !exited {
			t.Fatalf("relay still running 30s after start (retrying a refused client?); tail:\n%s", relay.LogTail(20))
		}
		log := relay.Log()
		t.Logf("exit %d: %s", code, strings.TrimSpace(tail(log, 1)))
		for _, want := range []string{"invalid_client", "fix: the OAuth token endpoint refused the client: check --kafka-sasl-oauth-client-id"} {
			if !strings.Contains(log, want) {
				t.Errorf("output lacks %q; tail:\n%s", want, tail(log, 10))
			}
		}
		if code != 1 || strings.Contains(log, clientSecret) {
			t.Errorf("exit code %d (want 1), or the secret is in the log", code)
		}
	})
	badGrants.Store(0)
	relay := StartRelay(t, relayEnv())
	if !within(30*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) || !relay.Running() }) || !relay.Running() {
		t.Fatalf("relay not streaming within 30s; tail:\n%s", relay.LogTail(30))
	}
	if !relay.LogContains(`SASL_PLAINTEXT (OAUTHBEARER)`) {
		t.Errorf("start-up log does not describe the Kafka security; tail:\n%s", relay.LogTail(30))
	}

	// The inbox: a token file a "sidecar" (this test) rewrites every 3 s
	// with a 12 s token; kafka-go's Dialer connections are not recycled,
	// so the broker cuts them and they reconnect.
	tokenFile := filepath.Join(t.TempDir(), "inbox-token")
	writeToken := func() {
		if err := os.WriteFile(tokenFile+".tmp", []byte(unsecuredToken(t, "inbox", oauthTokenLife)+"\n"), 0o600); err != nil {
			t.Error(err)
		}
		if err := os.Rename(tokenFile+".tmp", tokenFile); err != nil {
			t.Error(err)
		}
	}
	writeToken()
	inboxTokens := &countingProvider{p: oauthbearer.TokenFile(tokenFile), tokens: map[string]bool{}}
	inboxMech, err := oauthbearer.Mechanism(inboxTokens, nil)
	if err != nil {
		t.Fatal(err)
	}
	schema := inboxSchema(t, env)
	pool := ibPool(t, ctx, 6)
	if err := inbox.Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	state := pgx.Identifier{schema, "state"}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE TABLE `+state+` (id text PRIMARY KEY, version bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	consumer, err := inbox.New(inbox.Config{
		Name: "oauth_" + env.Sfx, Brokers: []string{k.OAuthAddr}, Topics: []string{env.Topic}, Pool: pool, Schema: schema,
		Handler:        versionedState(state, func(*record.Event) error { return nil }),
		CommitInterval: 200 * time.Millisecond, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		TuneReader: func(rc *kafka.ReaderConfig) {
			ibFastGroup(rc)
			rc.Dialer = &kafka.Dialer{ClientID: "inbox-it", Timeout: 10 * time.Second, DualStack: true, SASLMechanism: sasl.Mechanism(inboxMech)}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- consumer.Run(runCtx) }()
	defer func() { stopRun(); <-runErr }()

	// Load: 40 s of transactions of 3 of 12 aggregates, every 50 ms, while
	// the token file is rewritten.
	w := &Writer{DB: env.DB, Table: env.QuotedTable(), AggregateType: env.AggType, EventType: "OrderUpdated", SchemaVersion: 1,
		Ledger: NewLedger(), versions: map[string]int64{}}
	const loadFor = 40 * time.Second
	loadStart := time.Now()
	nextToken := time.Now().Add(3 * time.Second)
	for i := 0; time.Since(loadStart) < loadFor; i++ {
		aggs := []string{fmt.Sprint("a", i%12), fmt.Sprint("a", (i+4)%12), fmt.Sprint("a", (i+8)%12)}
		if _, err := w.Write(ctx, aggs, true); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(nextToken) {
			writeToken()
			nextToken = time.Now().Add(3 * time.Second)
		}
		// wall-clock: paces the load (a transaction every 50 ms for 40 s)
		time.Sleep(50 * time.Millisecond)
	}
	expected := w.Ledger.Committed()
	t.Logf("load: %d events in %s", len(expected), time.Since(loadStart).Round(time.Millisecond))

	loadEnd := time.Now()
	if !within(60*time.Second, 50*time.Millisecond, func() bool { return k.count(env.Topic, 3) >= len(expected) }) {
		t.Errorf("%d of %d events reached Kafka within 60s; relay tail:\n%s", k.count(env.Topic, 3), len(expected), relay.LogTail(30))
	}
	t.Logf("the last events reached Kafka %s after the last commit", time.Since(loadEnd).Round(time.Millisecond))
	recs := k.readAll(t, env.Topic, 3, len(expected), 60*time.Second)
	rep := CheckRecords(recs, 3, expected, CheckOptions{})
	t.Logf("relay over OAUTHBEARER: %s", rep)
	if !rep.OK() {
		t.Errorf("delivery check failed: %s", rep)
	}
	if !within(60*time.Second, 200*time.Millisecond, func() bool { return consumer.Stats().Applied >= int64(len(expected)) }) {
		t.Errorf("inbox applied %d of %d events within 60s: %+v", consumer.Stats().Applied, len(expected), consumer.Stats())
	}
	st := consumer.Stats()
	t.Logf("inbox: %+v", st)
	if st.Applied != int64(len(expected)) || st.Parked != 0 || st.DeadLettered != 0 {
		t.Errorf("inbox stats %+v: want applied %d, nothing parked or dead-lettered", st, len(expected))
	}
	// Per-aggregate order on the inbox side: each aggregate's state went
	// through every version (versionedState refuses a gap) to its last.
	last := map[string]int64{}
	for _, ev := range expected {
		last[ev.AggregateID] = max(last[ev.AggregateID], ev.Version)
	}
	for agg, v := range last {
		if got := countRows(t, env.DB, `SELECT coalesce((SELECT version FROM `+state+` WHERE id = $1), 0)`, agg); int64(got) != v {
			t.Errorf("inbox state of %s at version %d, want %d", agg, got, v)
		}
	}

	// Tokens and connections.
	recycles := len(relay.LogLines("closing Kafka connections before their SASL session ends", 1000))
	retries := relay.LogLines("publish failed, retrying", 1000)
	unreachable := relay.LogLines("kafka unreachable, retrying", 1000)
	t.Logf("relay: %d client-credentials grants (%d refused), %d connection recycles, %d publish retries, %d kafka-unreachable retries",
		grants.Load(), badGrants.Load(), recycles, len(retries), len(unreachable))
	// The idempotent producer's InitProducerId meets a transaction
	// coordinator still loading on a broker this young
	// (group_load_in_progress); every other retry would be a request that
	// met a closed session, which recycling is there to prevent.
	var connRetries []string
	for _, l := range retries {
		if !strings.Contains(l, `"reason":"group_load_in_progress"`) {
			connRetries = append(connRetries, l)
		}
	}
	for _, l := range firstN(connRetries, 5) {
		t.Logf("  retry: %s", l)
	}
	if len(connRetries) > 0 || len(unreachable) > 0 {
		t.Errorf("%d publish retries besides the coordinator's start-up and %d kafka-unreachable retries: requests met ended sessions", len(connRetries), len(unreachable))
	}
	t.Logf("inbox: %d SASL handshakes (new connections) with %d distinct tokens", inboxTokens.handshakes.Load(), inboxTokens.distinct())
	if grants.Load() < 3 || badGrants.Load() != 0 {
		t.Errorf("relay got %d tokens (%d refused grants), want at least 3 over %s with %s tokens", grants.Load(), badGrants.Load(), loadFor, oauthTokenLife)
	}
	if recycles < 4 {
		t.Errorf("relay recycled its connections %d times, want at least 4 over %s with %s sessions", recycles, loadFor, oauthReauth)
	}
	if inboxTokens.distinct() < 3 || inboxTokens.handshakes.Load() < 4 {
		t.Errorf("inbox used %d tokens in %d handshakes, want at least 3 and 4", inboxTokens.distinct(), inboxTokens.handshakes.Load())
	}
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
	}
	log := relay.Log()
	if strings.Contains(log, clientSecret) || strings.Contains(log, "auth=Bearer") {
		t.Errorf("the relay log shows the client secret or a token")
	}
	t.Logf("TestKafkaOAuthBearer took %s", time.Since(t0).Round(time.Millisecond))
}
