package helmtest

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// fullValues enables every option of the chart.
const fullValues = "../helm/outbox-relay/ci/full-values.yaml"

// TestDefaultValues renders the smallest install: values.yaml plus the
// two values the chart cannot default.
func TestDefaultValues(t *testing.T) {
	flags := parseFlagTable(t)
	o := decode(t, mustRender(t, requiredValues))
	checkCounts(t, o, map[string]int{"Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1})
	d := o.deployments[0]
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v: want 2 (a leader and a standby)", d.Spec.Replicas)
	}
	env := checkRelay(t, o, flags, metricsPort(t, flags))
	if drain := checkGracePeriod(t, d.Spec.Template.Spec, env); drain.Seconds() != 30 || *d.Spec.Template.Spec.TerminationGracePeriodSeconds != 45 {
		t.Errorf("shutdown timeout %s, grace %d s: want the binary's 30s and 45 s", drain, *d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}
	if got := d.Spec.Template.Spec.Containers[0].Image; got != "outbox-relay/outbox-relay:"+chartAppVersion(t) {
		t.Errorf("image %s: want the chart's appVersion as tag", got)
	}
	if pdb := o.pdbs[0]; pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) {
		t.Errorf("PodDisruptionBudget maxUnavailable %v: want 1", pdb.Spec.MaxUnavailable)
	}
	for _, name := range []string{"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", "OUTBOX_RELAY_KAFKA_TLS"} {
		if _, ok := env[name]; ok {
			t.Errorf("%s set without SASL or TLS configured", name)
		}
	}
}

// TestFullValues renders ci/full-values.yaml, which turns everything on.
func TestFullValues(t *testing.T) {
	flags := parseFlagTable(t)
	o := decode(t, mustRender(t, readFile(t, fullValues)))
	checkCounts(t, o, map[string]int{"Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1,
		"Job": 1, "ServiceMonitor": 1, "PrometheusRule": 1, "NetworkPolicy": 1})
	env := checkRelay(t, o, flags, 9188)
	for name, want := range map[string]string{
		"OUTBOX_RELAY_KAFKA_SASL_MECHANISM":  "SCRAM-SHA-512",
		"OUTBOX_RELAY_KAFKA_TLS":             "true",
		"OUTBOX_RELAY_MAX_INFLIGHT_BYTES":    "33554432", // not 3.3554432e+07
		"OUTBOX_RELAY_WAL_DISK_BUDGET":       "50GB",
		"OUTBOX_RELAY_CLEANUP_OLDER_THAN":    "7d",
		"OUTBOX_RELAY_SHUTDOWN_TIMEOUT":      "1m",
		"OUTBOX_RELAY_TOPIC_TEMPLATE":        "orders.{aggregate_type}.{event_type}",
		"OUTBOX_RELAY_KAFKA_TLS_SERVER_NAME": "kafka.internal",
	} {
		if env[name] != want {
			t.Errorf("%s=%q, want %q", name, env[name], want)
		}
	}
	for _, name := range []string{"OUTBOX_RELAY_KAFKA_SASL_PASSWORD_FILE", "OUTBOX_RELAY_KAFKA_TLS_CA_FILE", "OUTBOX_RELAY_KAFKA_TLS_CERT_FILE", "OUTBOX_RELAY_KAFKA_TLS_KEY_FILE"} {
		if env[name] == "" {
			t.Errorf("%s not set", name)
		}
	}
	checkGracePeriod(t, o.deployments[0].Spec.Template.Spec, env)
	if pdb := o.pdbs[0]; pdb.Spec.MinAvailable == nil || pdb.Spec.MaxUnavailable != nil {
		t.Errorf("PodDisruptionBudget: want minAvailable only, as the values set it")
	}
	checkMigrationJob(t, o, flags)
	checkServiceMonitor(t, o)
	checkPrometheusRule(t, o.prometheusRules[0].Spec)
	checkNetworkPolicy(t, o, networkPolicyOf(t, readFile(t, fullValues)))
}

// checkCounts asserts how many objects of each kind were rendered (a kind
// left out: none) and stops the test when that is wrong.
func checkCounts(t *testing.T, o objects, want map[string]int) {
	t.Helper()
	got := map[string]int{
		"Deployment": len(o.deployments), "Service": len(o.services), "ServiceAccount": len(o.serviceAccounts),
		"PodDisruptionBudget": len(o.pdbs), "Job": len(o.jobs), "NetworkPolicy": len(o.networkPolicies),
		"ServiceMonitor": len(o.serviceMonitors), "PrometheusRule": len(o.prometheusRules),
	}
	for kind, n := range got {
		if n != want[kind] {
			t.Errorf("%d %s objects rendered, want %d", n, kind, want[kind])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
}

// checkRelay asserts what every install needs of the Deployment, its
// Service and its PodDisruptionBudget, and returns the relay's variables.
func checkRelay(t *testing.T, o objects, flags flagTable, port int32) map[string]string {
	t.Helper()
	d := o.deployments[0]
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want the relay alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !reflect.DeepEqual(c.Args, []string{"run"}) {
		t.Errorf("args %q, want [run]", c.Args)
	}
	checkSecurity(t, pod)
	env := checkEnv(t, pod, c, flags)
	for _, name := range []string{"OUTBOX_RELAY_DATABASE_URL_FILE", "OUTBOX_RELAY_KAFKA_BROKERS", "OUTBOX_RELAY_METRICS_ADDR"} {
		if env[name] == "" {
			t.Errorf("%s not set", name)
		}
	}
	if _, ok := env["OUTBOX_RELAY_DATABASE_URL"]; ok {
		t.Error("OUTBOX_RELAY_DATABASE_URL set: the URL must come from the Secret's file")
	}
	checkProbes(t, c, env, port)
	if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() || c.Resources.Requests.Cpu().IsZero() {
		t.Errorf("resources %+v: want memory request and limit and a CPU request", c.Resources)
	}
	if s := d.Spec.Strategy.RollingUpdate; s == nil || s.MaxUnavailable == nil || s.MaxUnavailable.IntValue() != 0 {
		t.Error("rolling update: want maxUnavailable 0, so a standby is up before the leader stops")
	}

	podLabels := labels.Set(d.Spec.Template.Labels)
	sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	if !sel.Matches(podLabels) {
		t.Errorf("Deployment selector %v does not match its pods' labels %v", sel, podLabels)
	}
	svc := o.services[0]
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service selector %v does not match the pods", svc.Spec.Selector)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort != intstr.FromString("metrics") {
		t.Errorf("Service ports %+v: want one named metrics, to the container's metrics port", svc.Spec.Ports)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Error("Service: want publishNotReadyAddresses, so a stalled (not ready) leader is still scraped")
	}
	if pdb := o.pdbs[0]; pdb.Spec.Selector == nil || !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
		t.Error("PodDisruptionBudget selector does not match the pods")
	}
	if sa := pod.ServiceAccountName; len(o.serviceAccounts) == 1 && o.serviceAccounts[0].Name != sa {
		t.Errorf("pods use ServiceAccount %q, the chart creates %q", sa, o.serviceAccounts[0].Name)
	}
	return env
}

// checkMigrationJob asserts the opt-in hook runs migrate before install and
// upgrade with the admin Secret, on the relay's table, slot and publication.
func checkMigrationJob(t *testing.T, o objects, flags flagTable) {
	t.Helper()
	j := o.jobs[0]
	if hook := j.Annotations["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("migration Job hook %q, want pre-install,pre-upgrade", hook)
	}
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("migration Job restartPolicy %q, want Never", pod.RestartPolicy)
	}
	checkSecurity(t, pod)
	env := checkEnv(t, pod, pod.Containers[0], flags)
	if pod.Containers[0].Args[0] != "migrate" {
		t.Errorf("migration Job args %q, want [migrate]", pod.Containers[0].Args)
	}
	relay := o.deployments[0].Spec.Template.Spec
	relayEnv := map[string]string{}
	for _, e := range relay.Containers[0].Env {
		relayEnv[e.Name] = e.Value
	}
	for _, name := range []string{"OUTBOX_RELAY_TABLE", "OUTBOX_RELAY_SLOT", "OUTBOX_RELAY_PUBLICATION"} {
		if env[name] != relayEnv[name] || env[name] == "" {
			t.Errorf("%s: migrate gets %q, run %q; want the same", name, env[name], relayEnv[name])
		}
	}
	if env["OUTBOX_RELAY_GRANT_ROLE"] != "orders_relay" {
		t.Errorf("OUTBOX_RELAY_GRANT_ROLE=%q, want orders_relay", env["OUTBOX_RELAY_GRANT_ROLE"])
	}
	if secretOf(pod, "admin-database") == secretOf(relay, "database") {
		t.Error("the migration Job uses the runtime role's Secret; it needs its own admin one")
	}
}

func secretOf(pod corev1.PodSpec, volume string) string {
	for _, v := range pod.Volumes {
		if v.Name == volume && v.Secret != nil {
			return v.Secret.SecretName
		}
	}
	return ""
}

// checkServiceMonitor asserts the ServiceMonitor scrapes the metrics
// Service's port.
func checkServiceMonitor(t *testing.T, o objects) {
	t.Helper()
	sm, svc := o.serviceMonitors[0], o.services[0]
	if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not match the Service's labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v: want /metrics on the Service's port %s", sm.Spec.Endpoints, svc.Spec.Ports[0].Name)
	}
	if !servedPaths(t)["/metrics"] {
		t.Errorf("%s does not serve /metrics", healthSource)
	}
	if sm.Labels["release"] != "prometheus" {
		t.Error("ServiceMonitor lacks the labels of metrics.serviceMonitor.labels")
	}
}

// checkPrometheusRule asserts the PrometheusRule carries the project's
// alerts: the same groups as deploy/prometheus/alerts.yml.
func checkPrometheusRule(t *testing.T, got ruleFile) {
	t.Helper()
	var want ruleFile
	if err := yaml.UnmarshalStrict([]byte(readFile(t, alertsFile)), &want); err != nil {
		t.Fatalf("%s: %v", alertsFile, err)
	}
	if len(want.Groups) == 0 || !reflect.DeepEqual(got, want) {
		t.Errorf("PrometheusRule spec differs from %s:\n got %+v\nwant %+v", alertsFile, got, want)
	}
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	var meta struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, chartDir+"/Chart.yaml")), &meta); err != nil || meta.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", meta.AppVersion, err)
	}
	return meta.AppVersion
}

// TestInvalidValues: values the relay could not run with fail the render,
// naming the value to fix.
func TestInvalidValues(t *testing.T) {
	for _, tc := range []struct {
		name, values, want string
	}{
		{"no database secret", "kafka: {brokers: kafka:9092}", "database.existingSecret is required"},
		{"no brokers", "database: {existingSecret: relay-db}", "kafka.brokers is required"},
		{"grace not above the drain", requiredValues + "shutdownTimeout: 1m\nterminationGracePeriodSeconds: 60", "must exceed shutdownTimeout"},
		{"shutdown timeout form", requiredValues + "shutdownTimeout: 1.5m", "'1.5m' does not match"},
		{"misspelt value", requiredValues + "podDisruptionBudget: {maxUnavailible: 1}", "maxUnavailible"},
		{"unknown SASL mechanism", requiredValues + "kafka: {sasl: {mechanism: SCRAM}}", "/kafka/sasl/mechanism"},
		{"reserved flag in config", requiredValues + "config: {database-url: postgres://x}", "config.database-url: the chart sets --database-url"},
		{"SASL without secret", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: PLAIN, username: u}}", "kafka.sasl.existingSecret is required"},
		{"hook without admin secret", requiredValues + "migration: {hook: {enabled: true}}", "migration.hook.existingSecret is required"},
		{"SCRAM without username", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: SCRAM-SHA-256, existingSecret: s}}", "kafka.sasl.username is required with kafka.sasl.mechanism SCRAM-SHA-256"},
		{"unknown database auth", requiredValues + "database: {existingSecret: relay-db, auth: iam}", "/database/auth"},
		{"RDS IAM with a password", requiredValues + "database: {existingSecret: relay-db, auth: aws-rds-iam, passwordSecret: relay-db}", "database.passwordSecret with database.auth aws-rds-iam"},
		{"AWS region without RDS IAM", requiredValues + "database: {existingSecret: relay-db, awsRegion: eu-west-1}", "database.awsRegion is only used with database.auth aws-rds-iam"},
		{"OAUTHBEARER without secret", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER}}", "kafka.sasl.oauth.existingSecret is required with OAUTHBEARER: the Secret holding the token"},
		{"OAUTHBEARER grant without secret", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER, oauth: {tokenEndpoint: 'https://idp/token', clientId: c}}}", "the Secret holding the client secret"},
		{"OAUTHBEARER with username", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER, username: u, oauth: {existingSecret: s}}}", "OAUTHBEARER takes no username or password"},
		{"OAUTHBEARER grant without client id", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER, oauth: {existingSecret: s, tokenEndpoint: 'https://idp/token'}}}", "kafka.sasl.oauth.clientId is required with kafka.sasl.oauth.tokenEndpoint"},
		{"OAUTHBEARER client id without endpoint", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER, oauth: {existingSecret: s, clientId: c}}}", "only used with kafka.sasl.oauth.tokenEndpoint"},
		{"token endpoint not a URL", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: OAUTHBEARER, oauth: {existingSecret: s, clientId: c, tokenEndpoint: idp/token}}}", "/kafka/sasl/oauth/tokenEndpoint"},
		{"OAuth values with SCRAM", requiredValues + "kafka: {brokers: k:9092, sasl: {mechanism: SCRAM-SHA-512, username: u, existingSecret: s, oauth: {tokenEndpoint: 'https://idp/token'}}}", `kafka.sasl.oauth is set but kafka.sasl.mechanism is "SCRAM-SHA-512": use OAUTHBEARER`},
		{"reserved password file in config", requiredValues + "config: {database-password-file: /p}", "config.database-password-file: the chart sets"},
		{"reserved OAuth secret in config", requiredValues + "config: {kafka-sasl-oauth-client-secret: x}", "config.kafka-sasl-oauth-client-secret: the chart sets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v; want an error containing %q", err, tc.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}

// TestGracePeriodFollowsShutdownTimeout: left empty, the grace period is
// the shutdown timeout plus 15 s, whatever the timeout's form.
func TestGracePeriodFollowsShutdownTimeout(t *testing.T) {
	for timeout, want := range map[string]int64{"30s": 45, "1m30s": 105, "2m": 135, "1h": 3615} {
		o := decode(t, mustRender(t, requiredValues, "shutdownTimeout: "+timeout))
		pod := o.deployments[0].Spec.Template.Spec
		if got := pod.TerminationGracePeriodSeconds; got == nil || *got != want {
			t.Errorf("shutdownTimeout %s: terminationGracePeriodSeconds %v, want %d", timeout, got, want)
		}
	}
}

// TestImageDigest: a digest pins the image instead of the tag.
func TestImageDigest(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	o := decode(t, mustRender(t, requiredValues, "image: {digest: '"+digest+"'}"))
	if got := o.deployments[0].Spec.Template.Spec.Containers[0].Image; got != "outbox-relay/outbox-relay@"+digest {
		t.Errorf("image %s: want repository@digest", got)
	}
}
