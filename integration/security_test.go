//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
)

// TestSecurity runs the relay against a Kafka broker whose only client
// listener is SASL_SSL with client certificates required, and a
// PostgreSQL that accepts TCP only over SSL, as the least-privilege role
// `migrate --grant-role` creates, with every secret read from a *_FILE.
// One broker and one cluster serve all subtests (the broker's start-up is
// most of the cost).
func TestSecurity(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	t0 := time.Now()
	pki := newSecurePKI(t)
	k := startSecureKafka(t, pki)
	pg := startSecurePG(t, pki)

	env := NewEnv(t, EnvOptions{NoMigrate: true, NoTopic: true})
	env.DatabaseURL = pg.URL("postgres", "", pki.CA) // admin, over verify-full SSL
	env.Brokers = []string{k.Addr}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := OpenDB(ctx, env.DatabaseURL)
	if err != nil {
		t.Fatalf("admin connection over SSL: %v", err)
	}
	defer admin.Close()

	// migrate as the admin creates the role and its grants.
	const role = "outbox_relay"
	res := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role)
	if res.Code != 0 {
		t.Fatalf("migrate --grant-role: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 20))
	}
	t.Logf("migrate --grant-role:\n%s", res.Stdout)
	if !strings.Contains(res.Stdout, "role "+role+" created") {
		t.Fatalf("migrate did not report creating the role:\n%s", res.Stdout)
	}
	pgPassword := "pg-" + randSuffix()
	if _, err := admin.Exec(ctx, fmt.Sprintf("ALTER ROLE %s PASSWORD '%s'", role, pgPassword)); err != nil {
		t.Fatal(err)
	}

	// Secrets live in files, never in the environment or argv.
	secretFile := func(name, content string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodURL := secretFile("database-url", pg.URL(role, pgPassword, pki.CA))
	goodSASL := secretFile("sasl-password", k.Password)
	secrets := []string{pgPassword, k.Password}

	// relayEnv is the environment of a relay (or dlq command) under the
	// role, with overrides applied last.
	relayEnv := func(overrides ...string) []string {
		var base []string
		for _, kv := range env.BaseEnv() {
			if !strings.HasPrefix(kv, "OUTBOX_RELAY_DATABASE_URL=") {
				base = append(base, kv)
			}
		}
		return processEnv(base, []string{
			"OUTBOX_RELAY_DATABASE_URL_FILE=" + goodURL,
			"OUTBOX_RELAY_KAFKA_TLS_CA_FILE=" + pki.CA,
			"OUTBOX_RELAY_KAFKA_TLS_CERT_FILE=" + pki.KafkaClientCert,
			"OUTBOX_RELAY_KAFKA_TLS_KEY_FILE=" + pki.KafkaClientKey,
			"OUTBOX_RELAY_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
			"OUTBOX_RELAY_KAFKA_SASL_USERNAME=" + k.User,
			"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE=" + goodSASL,
			"OUTBOX_RELAY_CREATE_TOPICS=true",
			"OUTBOX_RELAY_TOPIC_PARTITIONS=3",
			"OUTBOX_RELAY_HEARTBEAT_INTERVAL=1s",
			"OUTBOX_RELAY_BACKOFF_MAX=1s",
		}, overrides)
	}
	noSecrets := func(t *testing.T, what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s shows a secret (%q)", what, s)
			}
		}
	}
	w := &Writer{DB: admin, Table: env.QuotedTable(), AggregateType: env.AggType, EventType: "OrderUpdated", SchemaVersion: 3,
		Ledger: NewLedger(), versions: map[string]int64{}}

	t.Run("RoleHasOnlyWhatTheRelayNeeds", func(t *testing.T) {
		var super, createRole, createDB, repl, bypass, login bool
		if err := admin.QueryRow(ctx, `select rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls, rolcanlogin
			from pg_roles where rolname = $1`, role).Scan(&super, &createRole, &createDB, &repl, &bypass, &login); err != nil {
			t.Fatal(err)
		}
		if super || createRole || createDB || bypass || !repl || !login {
			t.Errorf("role attributes: super=%v createrole=%v createdb=%v bypassrls=%v replication=%v login=%v; want only LOGIN REPLICATION",
				super, createRole, createDB, bypass, repl, login)
		}
		dl := "public.outbox_dead_letter"
		for _, c := range []struct {
			table, priv string
			want        bool
		}{
			{env.Table, "SELECT", true}, {env.Table, "INSERT", false}, {env.Table, "UPDATE", false}, {env.Table, "DELETE", false},
			{env.Table, "TRUNCATE", false}, {dl, "SELECT", true}, {dl, "INSERT", true}, {dl, "UPDATE", true}, {dl, "DELETE", false},
			{"public.outbox_relay_checkpoint", "SELECT", true}, {"public.outbox_relay_checkpoint", "DELETE", true},
			{"public.outbox_relay_checkpoint", "TRUNCATE", false},
			{"public.outbox_relay_schema_migrations", "SELECT", false},
		} {
			var got bool
			if err := admin.QueryRow(ctx, `select has_table_privilege($1, $2, $3)`, role, c.table, c.priv).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("%s on %s: %v, want %v", c.priv, c.table, got, c.want)
			}
		}
		var create bool
		if err := admin.QueryRow(ctx, `select has_schema_privilege($1, 'public', 'CREATE') or has_database_privilege($1, current_database(), 'CREATE')`, role).Scan(&create); err != nil {
			t.Fatal(err)
		}
		if create {
			t.Error("role may CREATE in the schema or database")
		}
		// Running migrate again keeps the role and its grants (idempotent).
		if res := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role); res.Code != 0 || !strings.Contains(res.Stdout, "role "+role+" exists") {
			t.Fatalf("second migrate --grant-role: exit %d\n%s\n%s", res.Code, res.Stdout, tail(res.Stderr, 10))
		}
	})

	t.Run("StreamsOverSASLSSLAndPostgresSSL", func(t *testing.T) {
		metrics := freePort(t)
		relay := StartRelay(t, relayEnv(fmt.Sprintf("OUTBOX_RELAY_METRICS_ADDR=127.0.0.1:%d", metrics)))
		if !within(30*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) || !relay.Running() }) || !relay.Running() {
			t.Fatalf("relay not streaming within 30s; tail:\n%s", relay.LogTail(30))
		}
		if !relay.LogContains(`SASL_SSL (SCRAM-SHA-512) with client certificate`) {
			t.Errorf("start-up log does not describe the Kafka security; tail:\n%s", relay.LogTail(30))
		}
		// 5 transactions x 4 aggregates, then a poison event (headers not an
		// object of strings) and one event parked behind it: the role must
		// be able to dead-letter and park.
		for i := 0; i < 5; i++ {
			if _, err := w.Write(ctx, []string{"a1", "a2", "a3", "a4"}, true); err != nil {
				t.Fatal(err)
			}
		}
		poison := w.NextEvents([]string{"p1"})
		parked := w.NextEvents([]string{"p1"})
		bad := `{"bad": 1}`
		if _, err := commitRows(ctx, admin, w.Table, poison, map[int]rowOverride{0: {headers: &bad}}); err != nil {
			t.Fatal(err)
		}
		if err := w.InsertTx(ctx, parked, true); err != nil {
			t.Fatal(err)
		}
		expected := w.Ledger.Committed()
		delete(expected, parked[0].ID) // published only once the poison is discarded
		if !within(30*time.Second, 200*time.Millisecond, func() bool { return k.count(env.Topic, 3) >= len(expected) }) {
			t.Fatalf("%d of %d events reached Kafka within 30s; relay tail:\n%s", k.count(env.Topic, 3), len(expected), relay.LogTail(30))
		}
		var dead, parkedN int
		if !within(20*time.Second, 200*time.Millisecond, func() bool {
			_ = admin.QueryRow(ctx, `select count(*) filter (where status = 'dead'), count(*) filter (where status = 'parked')
				from public.outbox_dead_letter where outbox_table = $1`, env.Table).Scan(&dead, &parkedN)
			return dead == 1 && parkedN == 1
		}) {
			t.Fatalf("dead-letter rows under the role: dead=%d parked=%d, want 1 and 1; relay tail:\n%s", dead, parkedN, relay.LogTail(30))
		}
		// dlq discard (UPDATE + a Kafka writer over SASL_SSL) under the role.
		dres := runCLI(t, 60*time.Second, relayEnv(), "dlq", "discard", poison[0].ID, "--reason", "security test")
		if dres.Code != 0 {
			t.Fatalf("dlq discard under the role: exit %d\n%s\n%s", dres.Code, dres.Stdout, tail(dres.Stderr, 20))
		}
		noSecrets(t, "dlq output", dres.Stdout+dres.Stderr)
		expected = w.Ledger.Committed()
		recs := k.readAll(t, env.Topic, 3, len(expected), 30*time.Second)
		rep := CheckRecords(recs, 3, expected, CheckOptions{Forbidden: map[string]Event{poison[0].ID: poison[0]}})
		t.Logf("over SASL_SSL: %s", rep)
		if !rep.OK() {
			t.Fatalf("delivery check failed: %s", rep)
		}

		// Both the pool and the replication connection (walsender) use SSL.
		var conns, sslConns, walsenders int
		if err := admin.QueryRow(ctx, `select count(*), count(*) filter (where s.ssl), count(*) filter (where a.backend_type = 'walsender')
			from pg_stat_activity a join pg_stat_ssl s using (pid) where a.usename = $1`, role).Scan(&conns, &sslConns, &walsenders); err != nil {
			t.Fatal(err)
		}
		t.Logf("relay connections as %s: %d, over SSL: %d, walsenders: %d", role, conns, sslConns, walsenders)
		if conns == 0 || sslConns != conns || walsenders != 1 {
			t.Errorf("relay connections: %d, over SSL %d, walsenders %d; want all over SSL and one walsender", conns, sslConns, walsenders)
		}

		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), "outbox_relay_") {
			t.Errorf("metrics look empty")
		}
		noSecrets(t, "/metrics", string(body))
		if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
			t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
		}
		noSecrets(t, "relay log", relay.Log())
		// The heartbeat (pg_logical_emit_message) works under the role too:
		// without it an idle outbox would pin WAL.
		if relay.LogContains("heartbeat failed") {
			t.Errorf("heartbeat fails under the role: %v", relay.LogLines("heartbeat failed", 2))
		}
	})

	// The other mechanisms, each streaming one more event.
	for _, mech := range []string{kafkaconn.MechanismPlain, kafkaconn.MechanismSCRAMSHA256} {
		t.Run("Mechanism"+strings.ReplaceAll(mech, "-", ""), func(t *testing.T) {
			relay := StartRelay(t, relayEnv("OUTBOX_RELAY_KAFKA_SASL_MECHANISM="+mech, "OUTBOX_RELAY_METRICS_ADDR="))
			if !within(30*time.Second, 100*time.Millisecond, func() bool { return relay.LogContains(`"message":"streaming"`) || !relay.Running() }) || !relay.Running() {
				t.Fatalf("relay not streaming within 30s; tail:\n%s", relay.LogTail(30))
			}
			before := k.count(env.Topic, 3)
			if _, err := w.Write(ctx, []string{"m-" + mech}, true); err != nil {
				t.Fatal(err)
			}
			if !within(20*time.Second, 100*time.Millisecond, func() bool { return k.count(env.Topic, 3) > before }) {
				t.Fatalf("no record published with %s within 20s; tail:\n%s", mech, relay.LogTail(20))
			}
			if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
				t.Errorf("SIGTERM: exited=%v code=%d, want 0", exited, code)
			}
		})
	}

	// Misconfigurations the relay must refuse at once (not retry), naming
	// the fix, and without printing a secret.
	badURL := func(user, password, ca, mode string) string {
		u := pg.URL(user, password, ca)
		if mode != "" {
			u = strings.Replace(u, "sslmode=verify-full", "sslmode="+mode, 1)
		}
		return secretFile("bad-url-"+randSuffix(), u)
	}
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"WrongKafkaCA", []string{"OUTBOX_RELAY_KAFKA_TLS_CA_FILE=" + pki.OtherCA},
			[]string{"x509: certificate signed by unknown authority", "fix: the broker's certificate is not signed by a trusted CA: set --kafka-tls-ca-file"}},
		{"KafkaClientCertOfAnotherCA", []string{"OUTBOX_RELAY_KAFKA_TLS_CERT_FILE=" + pki.OtherClientCert, "OUTBOX_RELAY_KAFKA_TLS_KEY_FILE=" + pki.OtherClientKey},
			[]string{"tls: ", "fix: the broker rejected the TLS handshake", "--kafka-tls-cert-file"}},
		{"WrongSASLPassword", []string{"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE=" + secretFile("wrong-sasl", "not-"+k.Password)},
			[]string{"SASL Authentication Failed", "fix: check --kafka-sasl-username and its password"}},
		{"KafkaWithoutTLS", []string{"OUTBOX_RELAY_KAFKA_TLS_CA_FILE=", "OUTBOX_RELAY_KAFKA_TLS_CERT_FILE=", "OUTBOX_RELAY_KAFKA_TLS_KEY_FILE="},
			[]string{"expecting TLS", "fix: the Kafka listener expects TLS: set --kafka-tls"}},
		{"WrongPostgresCA", []string{"OUTBOX_RELAY_DATABASE_URL_FILE=" + badURL(role, pgPassword, pki.OtherCA, "")},
			[]string{"x509: certificate signed by unknown authority", "fix: the PostgreSQL server's certificate is not signed by a trusted CA: set sslrootcert="}},
		{"WrongPostgresPassword", []string{"OUTBOX_RELAY_DATABASE_URL_FILE=" + badURL(role, "not-"+pgPassword, pki.CA, "")},
			[]string{"password authentication failed", "fix: the password for this user is wrong"}},
		{"PostgresWithoutSSL", []string{"OUTBOX_RELAY_DATABASE_URL_FILE=" + badURL(role, pgPassword, pki.CA, "disable")},
			[]string{"no encryption", "fix: the server accepts this user only over SSL (hostssl in pg_hba.conf): add sslmode=verify-full"}},
	} {
		t.Run("Refuses"+c.name, func(t *testing.T) {
			start := time.Now()
			relay := StartRelay(t, relayEnv(append([]string{"OUTBOX_RELAY_METRICS_ADDR="}, c.env...)...))
			code, exited := relay.Wait(30 * time.Second)
			if !exited {
				t.Fatalf("relay still running 30s after start (retrying instead of refusing?); tail:\n%s", relay.LogTail(20))
			}
			log := relay.Log()
			t.Logf("exit %d after %s: %s", code, time.Since(start).Round(time.Millisecond), strings.TrimSpace(tail(log, 1)))
			if code != 1 {
				t.Errorf("exit code %d, want 1", code)
			}
			for _, want := range c.want {
				if !strings.Contains(log, want) {
					t.Errorf("output lacks %q; tail:\n%s", want, tail(log, 10))
				}
			}
			if strings.Contains(log, `"message":"streaming"`) {
				t.Errorf("relay streamed despite the misconfiguration")
			}
			noSecrets(t, "relay output", log)
		})
	}
	t.Logf("TestSecurity took %s", time.Since(t0).Round(time.Millisecond))
}

// count sums the high-water marks of topic's partitions (0 while it does
// not exist).
func (k *secureKafka) count(topic string, partitions int) int {
	s, err := kafkaconn.Config{
		TLS:  kafkaconn.TLSConfig{CAFile: k.pki.CA, CertFile: k.pki.KafkaClientCert, KeyFile: k.pki.KafkaClientKey},
		SASL: kafkaconn.SASLConfig{Mechanism: kafkaconn.MechanismSCRAMSHA512, Username: k.User, Password: k.Password},
	}.Build()
	if err != nil {
		return 0
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for p := 0; p < partitions; p++ {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := k.client(s).ListOffsets(ctx, req)
	if err != nil {
		return 0
	}
	n := 0
	for _, po := range res.Topics[topic] {
		if po.Error == nil {
			n += int(po.LastOffset)
		}
	}
	return n
}
