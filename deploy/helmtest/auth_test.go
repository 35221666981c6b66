package helmtest

import (
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// managedValues: RDS IAM and OAUTHBEARER's client-credentials grant, the
// options full-values.yaml cannot combine with its password ones.
const managedValues = "../helm/outbox-relay/ci/managed-values.yaml"

// tokenFileValues: OAUTHBEARER with a token kept fresh in a Secret.
const tokenFileValues = `
kafka:
  sasl:
    mechanism: OAUTHBEARER
    oauth: {existingSecret: orders-relay-token, tokenKey: jwt}
`

// wantFlag is what the chart must render for one flag: its variable,
// the value (a _FILE variable: the Secret and key of the mounted file).
type wantFlag struct {
	flag, env, value string
	secret, key      string // for a file
}

// checkFlags asserts each variable is set, reads the flag it should (per
// configuration.md) with the value expected, and each file is the key of
// that Secret, mounted without subPath so a rotated Secret reaches it.
func checkFlags(t *testing.T, o objects, flags flagTable, want []wantFlag) map[string]string {
	t.Helper()
	pod := o.deployments[0].Spec.Template.Spec
	c := pod.Containers[0]
	env := checkEnv(t, pod, c, flags)
	for _, w := range want {
		got, ok := env[w.env]
		switch {
		case !ok:
			t.Errorf("%s not set (--%s)", w.env, w.flag)
			continue
		case flags[w.env].name != w.flag:
			t.Errorf("%s is the variable of --%s, want --%s", w.env, flags[w.env].name, w.flag)
		}
		if w.secret == "" {
			if got != w.value {
				t.Errorf("%s=%q, want %q", w.env, got, w.value)
			}
			continue
		}
		secret, key, m := mountedFile(pod, c, got)
		if secret != w.secret || key != w.key {
			t.Errorf("%s=%s: file of Secret %q key %q, want Secret %q key %q", w.env, got, secret, key, w.secret, w.key)
		}
		if m != nil && m.SubPath != "" {
			t.Errorf("%s: mount %s uses subPath %q, which the kubelet never updates", w.env, m.MountPath, m.SubPath)
		}
	}
	return env
}

// mountedFile returns the Secret and key behind file in c, and its mount.
func mountedFile(pod corev1.PodSpec, c corev1.Container, file string) (secret, key string, mount *corev1.VolumeMount) {
	dir, base := path.Split(file)
	for i, m := range c.VolumeMounts {
		if m.MountPath != strings.TrimSuffix(dir, "/") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.Secret == nil {
				continue
			}
			for _, item := range v.Secret.Items {
				if item.Path == base {
					return v.Secret.SecretName, item.Key, &c.VolumeMounts[i]
				}
			}
		}
	}
	return "", "", nil
}

func checkUnset(t *testing.T, env map[string]string, names ...string) {
	t.Helper()
	for _, name := range names {
		if _, ok := env[name]; ok {
			t.Errorf("%s set: %q", name, env[name])
		}
	}
}

// TestPasswordFile: full-values.yaml's database.passwordSecret becomes
// --database-password-file, re-read at each connect; its session lifetime
// goes with SCRAM.
func TestPasswordFile(t *testing.T) {
	flags := parseFlagTable(t)
	o := decode(t, mustRender(t, readFile(t, fullValues)))
	env := checkFlags(t, o, flags, []wantFlag{
		{flag: "database-password-file", env: "OUTBOX_RELAY_DATABASE_PASSWORD_FILE", secret: "orders-relay-db-password", key: "password"},
		{flag: "database-url", env: "OUTBOX_RELAY_DATABASE_URL_FILE", secret: "orders-relay-db", key: "database-url"},
		{flag: "kafka-sasl-password", env: "OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", secret: "orders-relay-kafka", key: "sasl-password"},
		{flag: "kafka-sasl-username", env: "OUTBOX_RELAY_KAFKA_SASL_USERNAME", value: "orders-relay"},
		{flag: "kafka-sasl-session-lifetime", env: "OUTBOX_RELAY_KAFKA_SASL_SESSION_LIFETIME", value: "55m"},
	})
	checkUnset(t, env, "OUTBOX_RELAY_DATABASE_AUTH", "OUTBOX_RELAY_DATABASE_AWS_REGION", "OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_FILE",
		"OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", "OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET_FILE")
}

// TestManagedValues renders ci/managed-values.yaml: RDS IAM (no password
// anywhere) and OAUTHBEARER's client-credentials grant.
func TestManagedValues(t *testing.T) {
	flags := parseFlagTable(t)
	o := decode(t, mustRender(t, readFile(t, managedValues)))
	checkCounts(t, o, map[string]int{"Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1})
	checkRelay(t, o, flags, 9187)
	env := checkFlags(t, o, flags, []wantFlag{
		{flag: "database-auth", env: "OUTBOX_RELAY_DATABASE_AUTH", value: "aws-rds-iam"},
		{flag: "database-aws-region", env: "OUTBOX_RELAY_DATABASE_AWS_REGION", value: "eu-west-1"},
		{flag: "kafka-sasl-mechanism", env: "OUTBOX_RELAY_KAFKA_SASL_MECHANISM", value: "OAUTHBEARER"},
		{flag: "kafka-sasl-oauth-token-endpoint", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", value: "https://idp.example.com/oauth2/token"},
		{flag: "kafka-sasl-oauth-client-id", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_ID", value: "orders-relay"},
		{flag: "kafka-sasl-oauth-client-secret", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET_FILE", secret: "orders-relay-oauth", key: "client-secret"},
		{flag: "kafka-sasl-oauth-scope", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_SCOPE", value: "kafka"},
		{flag: "kafka-sasl-oauth-extensions", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_EXTENSIONS", value: "logicalCluster=lkc-abc123,identityPoolId=pool-XyZ9"},
		{flag: "kafka-sasl-session-lifetime", env: "OUTBOX_RELAY_KAFKA_SASL_SESSION_LIFETIME", value: "1h"},
	})
	checkUnset(t, env, "OUTBOX_RELAY_DATABASE_PASSWORD_FILE", "OUTBOX_RELAY_KAFKA_SASL_USERNAME", "OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE",
		"OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_FILE")
	if sa := o.serviceAccounts[0]; sa.Annotations["eks.amazonaws.com/role-arn"] == "" {
		t.Error("ServiceAccount lacks the IRSA annotation of serviceAccount.annotations")
	}
	for _, v := range o.deployments[0].Spec.Template.Spec.Volumes {
		if v.Name == "database-password" || v.Name == "kafka-sasl" {
			t.Errorf("volume %s mounted without a password to hold", v.Name)
		}
	}
}

// TestOAuthTokenFile: with no token endpoint the relay reads the token
// from the Secret, a file the kubelet replaces when the Secret changes.
func TestOAuthTokenFile(t *testing.T) {
	flags := parseFlagTable(t)
	o := decode(t, mustRender(t, requiredValues, tokenFileValues))
	env := checkFlags(t, o, flags, []wantFlag{
		{flag: "kafka-sasl-mechanism", env: "OUTBOX_RELAY_KAFKA_SASL_MECHANISM", value: "OAUTHBEARER"},
		{flag: "kafka-sasl-oauth-token-file", env: "OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_FILE", secret: "orders-relay-token", key: "jwt"},
	})
	checkUnset(t, env, "OUTBOX_RELAY_KAFKA_SASL_OAUTH_TOKEN_ENDPOINT", "OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_ID",
		"OUTBOX_RELAY_KAFKA_SASL_OAUTH_CLIENT_SECRET_FILE", "OUTBOX_RELAY_KAFKA_SASL_OAUTH_SCOPE", "OUTBOX_RELAY_KAFKA_SASL_USERNAME",
		"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", "OUTBOX_RELAY_KAFKA_SASL_SESSION_LIFETIME")
}

// TestNoSubPath: no Secret of the relay is mounted through subPath, which
// would freeze a rotated password or a refreshed token at its first value.
func TestNoSubPath(t *testing.T) {
	for name, values := range map[string][]string{
		"full": {readFile(t, fullValues)}, "managed": {readFile(t, managedValues)}, "token file": {requiredValues, tokenFileValues},
	} {
		pod := decode(t, mustRender(t, values...)).deployments[0].Spec.Template.Spec
		for _, m := range pod.Containers[0].VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				t.Errorf("%s: mount %s at %s uses subPath", name, m.Name, m.MountPath)
			}
		}
	}
}

// TestReservedFlagsCoverChart: every flag the chart sets from its own
// values is refused in config, so config cannot set it a second time.
func TestReservedFlagsCoverChart(t *testing.T) {
	flags := parseFlagTable(t)
	set := map[string]bool{}
	for _, values := range [][]string{
		{requiredValues, "kafka: {sasl: {mechanism: PLAIN, username: u, existingSecret: s, sessionLifetime: 1h}, tls: {existingSecret: t, certKey: tls.crt, keyKey: tls.key, serverName: k}}", "database: {passwordSecret: p}"},
		{readFile(t, managedValues)},
		{requiredValues, tokenFileValues},
	} {
		for _, e := range decode(t, mustRender(t, values...)).deployments[0].Spec.Template.Spec.Containers[0].Env {
			if f, ok := flags[e.Name]; ok {
				set[f.name] = true
			}
		}
	}
	if len(set) < 20 {
		t.Fatalf("only %d flags found set by the chart: %v", len(set), slices.Sorted(maps.Keys(set)))
	}
	for _, flag := range slices.Sorted(maps.Keys(set)) {
		_, err := render(t, requiredValues, "config: {"+flag+": x}")
		if want := "config." + flag + ": the chart sets --" + flag; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config.%s: render error %v; want %q (add it to outbox-relay.reservedFlags)", flag, err, want)
		}
	}
}
