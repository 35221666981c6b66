//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TestDoctor runs `outbox-relay doctor` on a migrated env of the shared
// stack (no fail, exit 0), then with a publication that also publishes
// updates (a warning with its fix), with a topic whose min.insync.replicas
// exceeds its replication factor and an unreachable broker (fails), with a
// topic allowing unclean leader elections and --idempotent=false (warnings),
// and on a temp cluster with wal_level=replica (a fail with its fix, exit 1).
// The idempotent producer's check passes on the stack's broker (no ACLs).
func TestDoctor(t *testing.T) {
	inSuites(t, parallel, stack|kafkaVersions|pgVersions)
	env := NewEnv(t, EnvOptions{})
	res := env.RunCLI(30*time.Second, nil, "doctor", "--topics", env.Topic)
	t.Logf("doctor on the shared stack: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 0 || strings.Contains(res.Stdout, "FAIL") {
		t.Fatalf("doctor on a migrated env: exit %d, want 0 without FAIL\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	for _, want := range []string{"PASS  wal_level", "PASS  publication", "PASS  slot", "slot lag", "PASS  kafka",
		"PASS  idempotent producer", "the relay's principal may write idempotently",
		"WARN  topic " + env.Topic, "replication factor 1"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	env.Exec(`alter publication ` + env.Publication + ` set (publish = 'insert, update')`)
	res = env.RunCLI(30*time.Second, nil, "doctor")
	if res.Code != 0 || !strings.Contains(res.Stdout, "WARN  publication") ||
		!strings.Contains(res.Stdout, `fix: ALTER PUBLICATION "`+env.Publication+`" SET (publish = 'insert')`) {
		t.Errorf("publication publishing updates: exit %d, want 0 with a WARN and its fix\n%s", res.Code, res.Stdout)
	}

	// Kafka: min.insync.replicas above the replication factor fails every
	// acks=all write; unclean leader elections warn; a retention longer
	// than the dedupe window warns; without the idempotent producer doctor
	// warns that retries may duplicate; an unreachable broker fails.
	bad, unclean := "it."+env.Sfx+".badisr", "it."+env.Sfx+".unclean"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := kafkaClient().CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: bad, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "min.insync.replicas", ConfigValue: "2"}},
	}, {
		Topic: unclean, NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: []kafka.ConfigEntry{{ConfigName: "unclean.leader.election.enable", ConfigValue: "true"}},
	}}}); err != nil {
		t.Fatalf("create topics %s, %s: %v", bad, unclean, err)
	}
	res = env.RunCLI(30*time.Second, nil, "doctor", "--topics", env.Topic+","+bad+","+unclean, "--consumer-dedupe-retention", "1h",
		"--idempotent=false")
	t.Logf("doctor with bad topics: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 1 {
		t.Errorf("exit %d, want 1", res.Code)
	}
	for _, want := range []string{"FAIL  topic " + bad, "NOT_ENOUGH_REPLICAS", "lower min.insync.replicas",
		"WARN  topic " + unclean, "unclean.leader.election.enable=true: a replica that missed acknowledged events may become leader",
		"fix: kafka-configs.sh --alter --entity-type topics --entity-name " + unclean + " --add-config unclean.leader.election.enable=false",
		"WARN  idempotent producer", "off (--idempotent=false): writes are not idempotent",
		"exceeds the consumers' dedupe retention 1h0m0s"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	res = env.RunCLI(30*time.Second, []string{fmt.Sprintf("OUTBOX_RELAY_KAFKA_BROKERS=127.0.0.1:%d", freePort(t))}, "doctor")
	if res.Code != 1 || !strings.Contains(res.Stdout, "FAIL  kafka") || !strings.Contains(res.Stdout, "fix: check --kafka-brokers") {
		t.Errorf("unreachable Kafka: exit %d, want 1 with FAIL kafka and its fix\n%s", res.Code, res.Stdout)
	}

	// Privileges: the superuser warns; the role migrate --grant-role creates
	// passes; the same role missing one grant fails with the GRANT to run.
	if !strings.Contains(res.Stdout, "WARN  role") || !strings.Contains(res.Stdout, "is a superuser") {
		t.Errorf("doctor as the superuser lacks the role warning\n%s", res.Stdout)
	}
	role := "it_doctor_" + env.Sfx
	if r := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role); r.Code != 0 {
		t.Fatalf("migrate --grant-role: exit %d\n%s%s", r.Code, r.Stdout, tail(r.Stderr, 10))
	}
	t.Cleanup(func() {
		env.Exec(`drop owned by ` + role)
		env.Exec(`drop role ` + role)
	})
	u, err := url.Parse(env.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	asRole := []string{"OUTBOX_RELAY_DATABASE_URL=" + u.String()}
	res = env.RunCLI(30*time.Second, asRole, "doctor", "--topics", env.Topic)
	t.Logf("doctor as %s: exit %d\n%s", role, res.Code, res.Stdout)
	if res.Code != 0 || !strings.Contains(res.Stdout, "PASS  role") || !strings.Contains(res.Stdout, "PASS  privileges") {
		t.Errorf("doctor as the granted role: exit %d, want 0 with PASS role and PASS privileges\n%s%s", res.Code, res.Stdout, res.Stderr)
	}
	// Privileges and attributes beyond the relay's are warned about, with
	// the REVOKE (issue 36, row 9: a role with TRUNCATE and DELETE on the
	// outbox passed).
	env.Exec(`grant truncate, update on ` + env.QuotedTable() + ` to ` + role)
	env.Exec(`alter role ` + role + ` createrole`)
	res = env.RunCLI(30*time.Second, asRole, "doctor", "--topics", env.Topic)
	if res.Code != 0 {
		t.Errorf("doctor as a role with extra privileges: exit %d, want 0 (warnings only)\n%s", res.Code, res.Stdout)
	}
	for _, want := range []string{"WARN  privileges", "and more it never uses: UPDATE, TRUNCATE on TABLE " + env.QuotedTable(),
		"REVOKE UPDATE, TRUNCATE ON TABLE " + env.QuotedTable() + ` FROM "` + role + `"`,
		"WARN  role attributes", `"` + role + `" has CREATEROLE: the relay uses none of them`, `ALTER ROLE "` + role + `" NOCREATEROLE`} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor as a role with extra privileges: output lacks %q\n%s", want, res.Stdout)
		}
	}
	// migrate --grant-role on such a role says so instead of adding
	// REPLICATION silently.
	if r := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role); r.Code != 0 ||
		!strings.Contains(r.Stdout, "warning: role "+role+" also has CREATEROLE, which the relay never uses") {
		t.Errorf("migrate --grant-role on a CREATEROLE role: exit %d, no warning\n%s", r.Code, r.Stdout)
	}
	env.Exec(`revoke truncate, update on ` + env.QuotedTable() + ` from ` + role)
	env.Exec(`alter role ` + role + ` nocreaterole`)
	// With the cleanup schedule the role also needs DELETE on the outbox.
	res = env.RunCLI(30*time.Second, asRole, "doctor", "--topics", env.Topic, "--cleanup-older-than", "240h")
	if res.Code != 1 || !strings.Contains(res.Stdout, "lacks DELETE on TABLE "+`"public"."`+env.TableName+`"`) ||
		!strings.Contains(res.Stdout, "--grant-cleanup") {
		t.Errorf("doctor --cleanup-older-than as a role without DELETE: exit %d, want 1 with the missing DELETE\n%s", res.Code, res.Stdout)
	}
	if r := env.RunCLI(60*time.Second, nil, "migrate", "--grant-role", role, "--grant-cleanup"); r.Code != 0 ||
		!strings.Contains(r.Stdout, "DELETE ON TABLE") {
		t.Fatalf("migrate --grant-role --grant-cleanup: exit %d\n%s%s", r.Code, r.Stdout, tail(r.Stderr, 10))
	}
	res = env.RunCLI(30*time.Second, asRole, "doctor", "--topics", env.Topic, "--cleanup-older-than", "240h")
	if !strings.Contains(res.Stdout, "PASS  privileges") {
		t.Errorf("doctor --cleanup-older-than after --grant-cleanup: no PASS privileges\n%s", res.Stdout)
	}
	env.Exec(`revoke insert on public.outbox_dead_letter from ` + role)
	env.Exec(`alter role ` + role + ` noreplication`)
	res = env.RunCLI(30*time.Second, asRole, "doctor", "--topics", env.Topic)
	if res.Code != 1 {
		t.Errorf("doctor as a role missing a grant: exit %d, want 1\n%s", res.Code, res.Stdout)
	}
	for _, want := range []string{"FAIL  role", "lacks the REPLICATION attribute", `ALTER ROLE "` + role + `" REPLICATION`,
		"FAIL  privileges", `lacks INSERT on TABLE "public"."outbox_dead_letter"`,
		`GRANT INSERT ON TABLE "public"."outbox_dead_letter" TO "` + role + `"`} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor as a role missing a grant: output lacks %q\n%s", want, res.Stdout)
		}
	}

	pg := StartTempCluster(t, "wal_level=replica")
	res = env.RunCLI(30*time.Second, []string{"OUTBOX_RELAY_DATABASE_URL=" + pg.URL}, "doctor")
	t.Logf("doctor on wal_level=replica: exit %d\n%s", res.Code, res.Stdout)
	if res.Code != 1 {
		t.Errorf("exit %d, want 1 on a fail", res.Code)
	}
	for _, want := range []string{`is "replica"; logical replication needs logical`, "fix: ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}
	if !strings.Contains(res.Stderr, "some checks failed") {
		t.Errorf("stderr lacks the failure summary: %s", res.Stderr)
	}
}

// TestDoctorKafkaACL runs doctor against a broker that authorizes
// (StandardAuthorizer, SASL_SSL), as a principal without any ACL: the
// idempotent producer's InitProducerId is refused (a fail naming the
// grant and --idempotent=false), and the topic looks missing (the fix
// names the grant too). With WRITE on the topic (what Kafka 3.0+ asks of
// an idempotent producer) the check passes, and the topic's configs are
// unreadable (a warning naming DescribeConfigs). Doctor never asks for a transaction coordinator, so the
// broker has no __transaction_state afterwards.
func TestDoctorKafkaACL(t *testing.T) {
	inSuites(t, parallel, stack)
	requireRelay(t)
	pki := newSecurePKI(t)
	k := startSecureKafkaWith(t, pki, secureKafkaOptions{ACLs: true})
	env := NewEnv(t, EnvOptions{NoTopic: true})
	env.Brokers = []string{k.Addr}
	admin := k.client(k.adminSecurity(t))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if res, err := admin.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: env.Topic, NumPartitions: 1, ReplicationFactor: 1}}}); err != nil || res.Errors[env.Topic] != nil {
		t.Fatalf("create topic %s as the admin: %v %v", env.Topic, err, res)
	}

	res := env.RunCLI(30*time.Second, k.clientEnv(), "doctor", "--topics", env.Topic)
	t.Logf("doctor as %s without ACLs: exit %d\n%s", k.User, res.Code, res.Stdout)
	if res.Code != 1 {
		t.Errorf("exit %d, want 1\n%s", res.Code, tail(res.Stderr, 10))
	}
	for _, want := range []string{"PASS  kafka", "FAIL  idempotent producer", "the relay's principal may not write idempotently", "Cluster Authorization Failed",
		"fix: grant IDEMPOTENT_WRITE on the cluster (Kafka < 3.0) or WRITE on the outbox topics (3.0+), or run with --idempotent=false",
		// kafka-go answers metadata from its cache, where a topic the
		// principal may not describe is unknown.
		"WARN  topic " + env.Topic, "if it exists, the relay's principal may not describe it: grant Describe and Write on the topic"} {
		if !strings.Contains(res.Stdout, want) {
			t.Errorf("doctor output lacks %q", want)
		}
	}

	acl, err := admin.CreateACLs(ctx, &kafka.CreateACLsRequest{ACLs: []kafka.ACLEntry{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: env.Topic, ResourcePatternType: kafka.PatternTypeLiteral,
		Principal: "User:" + k.User, Host: "*", Operation: kafka.ACLOperationTypeWrite, PermissionType: kafka.ACLPermissionTypeAllow,
	}}})
	if err != nil || len(acl.Errors) != 1 || acl.Errors[0] != nil {
		t.Fatalf("grant WRITE on %s: %v %v", env.Topic, err, acl)
	}
	// The ACL reaches the broker's authorizer through the metadata log.
	if !within(15*time.Second, 500*time.Millisecond, func() bool {
		res = env.RunCLI(30*time.Second, k.clientEnv(), "doctor", "--topics", env.Topic)
		return strings.Contains(res.Stdout, "PASS  idempotent producer")
	}) {
		t.Errorf("doctor after WRITE on the topic: no PASS idempotent producer\n%s", res.Stdout)
	}
	t.Logf("doctor as %s with WRITE on %s: exit %d\n%s", k.User, env.Topic, res.Code, res.Stdout)
	if res.Code != 0 || strings.Contains(res.Stdout, "FAIL") {
		t.Errorf("doctor with WRITE on the topic: exit %d, want 0 without FAIL", res.Code)
	}
	if !strings.Contains(res.Stdout, "configs unreadable") || !strings.Contains(res.Stdout, "--operation DescribeConfigs --topic "+env.Topic) {
		t.Errorf("doctor without DESCRIBE_CONFIGS on the topic: no warning with the grant")
	}

	md, err := admin.Metadata(ctx, &kafka.MetadataRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range md.Topics {
		if tp.Name == "__transaction_state" {
			t.Error("doctor created __transaction_state: it asked for a transaction coordinator")
		}
	}
}
