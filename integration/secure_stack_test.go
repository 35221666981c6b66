//go:build integration

package integration

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/kafkaconn"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testpki"
)

// securePKI is the certificates of the security tests, as files.
type securePKI struct {
	Dir string
	// CA signed every server and the good client certificates; OtherCA is
	// the impostor's.
	CA, OtherCA                     string
	KafkaClientCert, KafkaClientKey string
	OtherClientCert, OtherClientKey string
	// KafkaKeystore is the broker's key (PKCS#8) and certificate in one
	// PEM file, for ssl.keystore.type=PEM.
	KafkaKeystore          string
	PGServerCert, PGServer string // certificate, key (owned by postgres)
}

func newSecurePKI(t *testing.T) *securePKI {
	t.Helper()
	// Not t.TempDir(): the postgres user must read the server key.
	dir, err := os.MkdirTemp("", "outbox-relay-it-sec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := &securePKI{Dir: dir}
	ca, err := testpki.NewCA("outbox-relay test CA")
	must(err)
	other, err := testpki.NewCA("impostor CA")
	must(err)
	p.CA, err = ca.WriteCA(dir, "ca")
	must(err)
	p.OtherCA, err = other.WriteCA(dir, "other-ca")
	must(err)
	cl, err := ca.Client("outbox-relay")
	must(err)
	p.KafkaClientCert, p.KafkaClientKey, err = cl.Write(dir, "kafka-client")
	must(err)
	ocl, err := other.Client("outbox-relay")
	must(err)
	p.OtherClientCert, p.OtherClientKey, err = ocl.Write(dir, "other-client")
	must(err)
	kb, err := ca.Server("kafka")
	must(err)
	p.KafkaKeystore = filepath.Join(dir, "kafka-keystore.pem")
	must(os.WriteFile(p.KafkaKeystore, append(append([]byte{}, kb.KeyPEM...), kb.CertPEM...), 0o600))
	ps, err := ca.Server("postgres")
	must(err)
	p.PGServerCert, p.PGServer, err = ps.Write(dir, "pg-server")
	must(err)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		must(err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		must(os.Chown(p.PGServer, uid, gid)) // PostgreSQL insists on owning its key
	}
	return p
}

// clientEnv is the relay's environment for k: TLS with a client
// certificate and SCRAM-SHA-512 credentials.
func (k *secureKafka) clientEnv() []string {
	return []string{
		"OUTBOX_RELAY_KAFKA_TLS_CA_FILE=" + k.pki.CA,
		"OUTBOX_RELAY_KAFKA_TLS_CERT_FILE=" + k.pki.KafkaClientCert,
		"OUTBOX_RELAY_KAFKA_TLS_KEY_FILE=" + k.pki.KafkaClientKey,
		"OUTBOX_RELAY_KAFKA_SASL_MECHANISM=SCRAM-SHA-512",
		"OUTBOX_RELAY_KAFKA_SASL_USERNAME=" + k.User,
		"OUTBOX_RELAY_KAFKA_SASL_PASSWORD=" + k.Password,
	}
}

// secureKafka is a single-node Kafka 4.1.1 (KRaft) whose only client
// listener is SASL_SSL with ssl.client.auth=required and the mechanisms
// PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512. The controller and inter-broker
// listeners are PLAINTEXT on loopback, never advertised to clients.
type secureKafka struct {
	Addr string
	// OAuthAddr and OAuthNoReauthAddr are the OAUTHBEARER listeners of
	// secureKafkaOptions.OAuth.
	OAuthAddr, OAuthNoReauthAddr string
	User                         string
	Password                     string
	// Admin and AdminPassword are a super user's SCRAM credentials, set
	// when the broker authorizes (secureKafkaOptions.ACLs); User then may
	// do only what ACLs allow.
	Admin, AdminPassword string
	pki                  *securePKI
	dir                  string
	cmd                  *exec.Cmd
	done                 chan struct{}
}

// kafkaLibs is the jar cache of scripts/stack.sh.
func kafkaLibs(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("OUTBOX_RELAY_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "outbox-relay")
	}
	libs := filepath.Join(cache, "kafka-4.1.1", "libs")
	if _, err := os.Stat(filepath.Join(libs, ".outbox-relay-complete")); err != nil {
		t.Fatalf("Kafka jars not cached in %s (scripts/stack.sh up fetches them): %v", libs, err)
	}
	return libs
}

// secureKafkaOptions are the variants of the secure broker.
type secureKafkaOptions struct {
	// ACLs turns on KRaft's StandardAuthorizer: the SCRAM user Admin and
	// the PLAINTEXT controller and inter-broker listeners (User:ANONYMOUS)
	// are super users, User is allowed nothing until an ACL says so.
	ACLs bool
	// OAuth adds two SASL_PLAINTEXT listeners with only OAUTHBEARER,
	// validated by Kafka's unsecured JWS validator (unsigned tokens with
	// sub and exp; see unsecuredToken): secureKafka.OAuthAddr, whose
	// sessions also end after OAuthReauth (connections.max.reauth.ms),
	// and OAuthNoReauthAddr, without that setting.
	OAuth       bool
	OAuthReauth time.Duration
	// Props are extra server.properties lines, e.g.
	// "transaction.max.timeout.ms=30000" (static broker settings no
	// client can change on the running broker).
	Props []string
}

func startSecureKafka(t *testing.T, pki *securePKI) *secureKafka {
	t.Helper()
	return startSecureKafkaWith(t, pki, secureKafkaOptions{})
}

func startSecureKafkaWith(t *testing.T, pki *securePKI, opts secureKafkaOptions) *secureKafka {
	t.Helper()
	start := time.Now()
	libs := kafkaLibs(t)
	dir := t.TempDir()
	port, ctrl, internal := freePort(t), freePort(t), freePort(t)
	k := &secureKafka{Addr: fmt.Sprintf("127.0.0.1:%d", port), User: "relay", Password: "kafka-" + randSuffix(), pki: pki, dir: dir, done: make(chan struct{})}
	var authz string
	if opts.ACLs {
		k.Admin, k.AdminPassword = "admin", "kafka-admin-"+randSuffix()
		authz = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer\nsuper.users=User:ANONYMOUS;User:" + k.Admin + "\n"
	}
	// The OAuth listeners, if any: never inter-broker, so the broker
	// needs no token of its own.
	var oauthListeners, oauthMap, oauthConf string
	if opts.OAuth {
		op, onr := freePort(t), freePort(t)
		k.OAuthAddr, k.OAuthNoReauthAddr = fmt.Sprintf("127.0.0.1:%d", op), fmt.Sprintf("127.0.0.1:%d", onr)
		oauthListeners = fmt.Sprintf(",OAUTH://127.0.0.1:%d,OAUTHNR://127.0.0.1:%d", op, onr)
		oauthMap = ",OAUTH:SASL_PLAINTEXT,OAUTHNR:SASL_PLAINTEXT"
		for _, l := range []string{"oauth", "oauthnr"} {
			oauthConf += "listener.name." + l + ".sasl.enabled.mechanisms=OAUTHBEARER\n" +
				"listener.name." + l + `.oauthbearer.sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required unsecuredLoginStringClaim_sub="broker" unsecuredValidatorAllowableClockSkewMs="1000";` + "\n" +
				"listener.name." + l + ".oauthbearer.sasl.server.callback.handler.class=org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler\n"
		}
		if opts.OAuthReauth > 0 {
			oauthConf += fmt.Sprintf("listener.name.oauth.oauthbearer.connections.max.reauth.ms=%d\n", opts.OAuthReauth.Milliseconds())
		}
	}
	props := filepath.Join(dir, "server.properties")
	conf := fmt.Sprintf(`node.id=1
process.roles=broker,controller
controller.quorum.voters=1@127.0.0.1:%[2]d
controller.listener.names=CONTROLLER
listeners=SECURE://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d,INTERNAL://127.0.0.1:%[3]d%[9]s
advertised.listeners=SECURE://127.0.0.1:%[1]d,INTERNAL://127.0.0.1:%[3]d%[9]s
inter.broker.listener.name=INTERNAL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,INTERNAL:PLAINTEXT,SECURE:SASL_SSL%[10]s
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.secure.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_%[4]s="%[5]s";
listener.name.secure.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.secure.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.secure.ssl.keystore.type=PEM
listener.name.secure.ssl.keystore.location=%[6]s
listener.name.secure.ssl.truststore.type=PEM
listener.name.secure.ssl.truststore.location=%[7]s
listener.name.secure.ssl.client.auth=required
log.dirs=%[8]s
auto.create.topics.enable=false
num.partitions=3
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
`, port, ctrl, internal, k.User, k.Password, pki.KafkaKeystore, pki.CA, filepath.Join(dir, "data"), oauthListeners, oauthMap) + authz + oauthConf
	for _, p := range opts.Props {
		conf += p + "\n"
	}
	if err := os.WriteFile(props, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	java := func(ctx context.Context, args ...string) *exec.Cmd {
		return exec.CommandContext(ctx, "java", append([]string{"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
			"-Djava.awt.headless=true", "-Dkafka.logs.dir=" + dir,
			"-Dlog4j2.configurationFile=" + filepath.Join(repoRoot, "scripts", "kafka", "log4j2.xml"),
			"-cp", libs + "/*"}, args...)...)
	}
	// SCRAM credentials are written into the metadata log at format time
	// (KRaft has no ZooKeeper to hold them before the broker runs).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	scram := fmt.Sprintf("[name=%s,password=%s]", k.User, k.Password)
	format := []string{"kafka.tools.StorageTool", "format", "-t", kafkaClusterID(), "-c", props,
		"--add-scram", "SCRAM-SHA-256=" + scram, "--add-scram", "SCRAM-SHA-512=" + scram}
	if k.Admin != "" {
		format = append(format, "--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", k.Admin, k.AdminPassword))
	}
	out, err := java(ctx, format...).CombinedOutput()
	if err != nil {
		t.Fatalf("kafka storage format: %v\n%s", err, out)
	}
	logf, err := os.Create(filepath.Join(dir, "kafka.out"))
	if err != nil {
		t.Fatal(err)
	}
	k.cmd = java(context.Background(), "kafka.Kafka", props)
	k.cmd.Stdout, k.cmd.Stderr = logf, logf
	k.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := k.cmd.Start(); err != nil {
		t.Fatalf("start kafka: %v", err)
	}
	go func() { _ = k.cmd.Wait(); logf.Close(); close(k.done) }()
	t.Cleanup(k.stop)
	sec := k.security(t, kafkaconn.MechanismSCRAMSHA512)
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-k.done:
			t.Fatalf("secure kafka exited during start-up:\n%s", k.logTail())
		default:
		}
		mctx, mcancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := k.client(sec).Metadata(mctx, &kafka.MetadataRequest{})
		mcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("secure kafka not ready on %s after 90s (last error %v):\n%s", k.Addr, err, k.logTail())
		}
		// wall-clock: poll interval of a wait for Kafka with a deadline
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("secure kafka (SASL_SSL, client auth required) up on %s in %s, pid %d", k.Addr, time.Since(start).Round(time.Millisecond), k.cmd.Process.Pid)
	return k
}

func (k *secureKafka) logTail() string {
	b, _ := os.ReadFile(filepath.Join(k.dir, "server.log"))
	o, _ := os.ReadFile(filepath.Join(k.dir, "kafka.out"))
	return tail(string(o), 20) + "\n" + tail(string(b), 40)
}

func (k *secureKafka) stop() {
	select {
	case <-k.done:
		return
	default:
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.done:
	case <-time.After(15 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.done
	}
}

// security is what a well-configured client uses.
func (k *secureKafka) security(t *testing.T, mechanism string) kafkaconn.Security {
	t.Helper()
	s, err := kafkaconn.Config{
		TLS:  kafkaconn.TLSConfig{CAFile: k.pki.CA, CertFile: k.pki.KafkaClientCert, KeyFile: k.pki.KafkaClientKey},
		SASL: kafkaconn.SASLConfig{Mechanism: mechanism, Username: k.User, Password: k.Password},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// adminSecurity is the super user's (SCRAM-SHA-512), on a broker started
// with secureKafkaOptions.ACLs.
func (k *secureKafka) adminSecurity(t *testing.T) kafkaconn.Security {
	t.Helper()
	if k.Admin == "" {
		t.Fatal("the secure broker has no admin: start it with secureKafkaOptions.ACLs")
	}
	s, err := kafkaconn.Config{
		TLS:  kafkaconn.TLSConfig{CAFile: k.pki.CA, CertFile: k.pki.KafkaClientCert, KeyFile: k.pki.KafkaClientKey},
		SASL: kafkaconn.SASLConfig{Mechanism: kafkaconn.MechanismSCRAMSHA512, Username: k.Admin, Password: k.AdminPassword},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (k *secureKafka) client(s kafkaconn.Security) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(k.Addr), Transport: s.Transport("outbox-relay-it", 3*time.Second, time.Second), Timeout: 5 * time.Second}
}

// readAll reads every record of topic's partitions (from the start) over
// SASL_SSL until want records arrived or timeout passes.
func (k *secureKafka) readAll(t *testing.T, topic string, partitions, want int, timeout time.Duration) []Record {
	t.Helper()
	s := k.security(t, kafkaconn.MechanismSCRAMSHA256)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var recs []Record
	for p := 0; p < partitions; p++ {
		conn, err := s.Dialer("outbox-relay-it", 5*time.Second).DialLeader(ctx, "tcp", k.Addr, topic, p)
		if err != nil {
			t.Fatalf("dial leader %s[%d]: %v", topic, p, err)
		}
		last, err := conn.ReadLastOffset()
		conn.Close()
		if err != nil {
			t.Fatalf("last offset %s[%d]: %v", topic, p, err)
		}
		if last == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{k.Addr}, Topic: topic, Partition: p, MaxWait: 200 * time.Millisecond,
			Dialer: s.Dialer("outbox-relay-it", 5*time.Second)})
		for off := int64(0); off < last; off++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				r.Close()
				t.Fatalf("read %s[%d]@%d: %v", topic, p, off, err)
			}
			rec := Record{Partition: m.Partition, Offset: m.Offset, Key: string(m.Key), Value: m.Value, Time: m.Time,
				Headers: map[string]string{}, HeaderN: map[string]int{}}
			for _, h := range m.Headers {
				rec.Headers[h.Key] = string(h.Value)
				rec.HeaderN[h.Key]++
			}
			recs = append(recs, rec)
		}
		r.Close()
	}
	if len(recs) < want {
		t.Logf("read %d records of %s, want %d", len(recs), topic, want)
	}
	return recs
}

// securePG is a temp cluster with ssl = on whose pg_hba.conf accepts TCP
// only over SSL (hostssl): the admin postgres by trust, everyone else by
// SCRAM password.
type securePG struct {
	*TempCluster
	pki *securePKI
}

func startSecurePG(t *testing.T, pki *securePKI) *securePG {
	t.Helper()
	c := StartTempCluster(t, "wal_level=logical", "ssl=on", "ssl_cert_file="+pki.PGServerCert, "ssl_key_file="+pki.PGServer,
		"max_slot_wal_keep_size=1GB")
	hba := "local all all trust\nhostssl all postgres 127.0.0.1/32 trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(c.Dir, "data", "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Exec(t, `select pg_reload_conf()`) // the last connection without SSL
	pg := &securePG{TempCluster: c, pki: pki}
	// pg_reload_conf only signals; wait until plain TCP is refused.
	if !within(10*time.Second, 100*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		db, err := OpenDB(ctx, c.URL)
		if err == nil {
			db.Close()
		}
		return err != nil && strings.Contains(err.Error(), "no encryption")
	}) {
		t.Fatal("temp cluster still accepts TCP without SSL after the pg_hba.conf reload")
	}
	return pg
}

// URL is a verify-full URL for user (password may be empty) trusting ca.
func (pg *securePG) URL(user, password, ca string) string {
	u := user
	if password != "" {
		u += ":" + password
	}
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=verify-full&sslrootcert=%s", u, pg.Port, ca)
}

// kafkaClusterID returns a random Kafka Uuid (16 bytes, URL-safe base64 without
// padding) that does not start with '-': StorageTool's argument parser would
// take "-t -xyz…" for a missing value and an unknown option (1 id in 64).
func kafkaClusterID() string {
	id := make([]byte, 16)
	for {
		_, _ = rand.Read(id)
		if s := base64.RawURLEncoding.EncodeToString(id); s[0] != '-' {
			return s
		}
	}
}
