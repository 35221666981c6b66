package helmtest

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// Values of networkPolicy the tests render.
const (
	// metricsPeers lets the monitoring namespace's Prometheus in.
	metricsPeers = `
networkPolicy:
  enabled: true
  metricsFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
      podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
    - ipBlock: {cidr: 10.0.0.0/16}
`
	// egressRules reach PostgreSQL by address and Kafka by namespace.
	egressRules = `
networkPolicy:
  enabled: true
  egress:
    enabled: true
    to:
      - to: [{ipBlock: {cidr: 10.20.0.0/24}}]
        ports: [{port: 5432, protocol: TCP}]
      - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: kafka}}}]
        ports: [{port: 9093, protocol: TCP}]
`
)

// networkPolicyValues is values.yaml's networkPolicy, in the API's types.
type networkPolicyValues struct {
	Enabled     bool                             `json:"enabled"`
	MetricsFrom []networkingv1.NetworkPolicyPeer `json:"metricsFrom"`
	Egress      struct {
		Enabled bool                                   `json:"enabled"`
		To      []networkingv1.NetworkPolicyEgressRule `json:"to"`
	} `json:"egress"`
}

// networkPolicyOf returns the networkPolicy values of the YAML documents,
// merged in order (each sets whole lists, so a field-wise merge is enough).
func networkPolicyOf(t *testing.T, values ...string) networkPolicyValues {
	t.Helper()
	var np networkPolicyValues
	for _, v := range values {
		var doc struct {
			NetworkPolicy *networkPolicyValues `json:"networkPolicy"`
		}
		if err := yaml.Unmarshal([]byte(v), &doc); err != nil {
			t.Fatalf("values: %v", err)
		}
		if n := doc.NetworkPolicy; n != nil {
			np.Enabled = np.Enabled || n.Enabled
			if n.MetricsFrom != nil {
				np.MetricsFrom = n.MetricsFrom
			}
			np.Egress.Enabled = np.Egress.Enabled || n.Egress.Enabled
			if n.Egress.To != nil {
				np.Egress.To = n.Egress.To
			}
		}
	}
	return np
}

// checkNetworkPolicy asserts the NetworkPolicy selects exactly the
// Deployment's pods, lets only the given peers in and only to the metrics
// port, and, with egress on, lets out DNS and the given rules alone.
func checkNetworkPolicy(t *testing.T, o objects, want networkPolicyValues) {
	t.Helper()
	if len(o.networkPolicies) != 1 {
		t.Fatalf("%d NetworkPolicies rendered, want 1", len(o.networkPolicies))
	}
	spec := o.networkPolicies[0].Spec
	d := o.deployments[0]
	if sel := spec.PodSelector; !reflect.DeepEqual(sel.MatchLabels, d.Spec.Selector.MatchLabels) || len(sel.MatchExpressions) != 0 {
		t.Errorf("NetworkPolicy podSelector %+v: want the Deployment's selector, matchLabels %v", sel, d.Spec.Selector.MatchLabels)
	}
	if !labels.SelectorFromSet(spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy podSelector does not match the relays' labels %v", d.Spec.Template.Labels)
	}

	wantTypes := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if want.Egress.Enabled {
		wantTypes = append(wantTypes, networkingv1.PolicyTypeEgress)
	}
	if !reflect.DeepEqual(spec.PolicyTypes, wantTypes) {
		t.Errorf("policyTypes %v, want %v", spec.PolicyTypes, wantTypes)
	}

	for _, r := range spec.Ingress {
		if len(r.From) == 0 {
			t.Errorf("ingress rule %+v has no from: it admits every source", r)
		}
	}
	switch {
	case len(want.MetricsFrom) == 0:
		if len(spec.Ingress) != 0 {
			t.Errorf("ingress %+v with no metricsFrom: want none, the port closed", spec.Ingress)
		}
	case len(spec.Ingress) != 1:
		t.Errorf("%d ingress rules, want one, to the metrics port", len(spec.Ingress))
	default:
		r := spec.Ingress[0]
		if !reflect.DeepEqual(r.From, want.MetricsFrom) {
			t.Errorf("ingress from %+v, want networkPolicy.metricsFrom %+v", r.From, want.MetricsFrom)
		}
		port := intstr.FromInt32(metricsContainerPort(t, d.Spec.Template.Spec))
		if len(r.Ports) != 1 || !isPort(r.Ports[0], corev1.ProtocolTCP, port) {
			t.Errorf("ingress ports %+v, want the metrics port alone, TCP %s", r.Ports, port.String())
		}
	}

	if !want.Egress.Enabled {
		if spec.Egress != nil {
			t.Errorf("egress %+v with networkPolicy.egress off: want none (and no Egress policy type)", spec.Egress)
		}
		return
	}
	if len(spec.Egress) != 1+len(want.Egress.To) {
		t.Fatalf("%d egress rules, want DNS and the %d of networkPolicy.egress.to", len(spec.Egress), len(want.Egress.To))
	}
	dns, dnsPort := spec.Egress[0], intstr.FromInt32(53)
	if len(dns.To) != 0 || len(dns.Ports) != 2 || !isPort(dns.Ports[0], corev1.ProtocolUDP, dnsPort) || !isPort(dns.Ports[1], corev1.ProtocolTCP, dnsPort) {
		t.Errorf("first egress rule %+v: want DNS, UDP and TCP 53 to any resolver", dns)
	}
	if !reflect.DeepEqual(spec.Egress[1:], want.Egress.To) {
		t.Errorf("egress rules %+v, want networkPolicy.egress.to %+v", spec.Egress[1:], want.Egress.To)
	}
}

func isPort(p networkingv1.NetworkPolicyPort, protocol corev1.Protocol, port intstr.IntOrString) bool {
	return p.Protocol != nil && *p.Protocol == protocol && p.Port != nil && *p.Port == port && p.EndPort == nil
}

// metricsContainerPort is the relay container's port named metrics.
func metricsContainerPort(t *testing.T, pod corev1.PodSpec) int32 {
	t.Helper()
	for _, p := range pod.Containers[0].Ports {
		if p.Name == "metrics" {
			return p.ContainerPort
		}
	}
	t.Fatal("the relay container has no port named metrics")
	return 0
}

// TestNetworkPolicyOffByDefault: no NetworkPolicy unless enabled, whatever
// else networkPolicy sets (egress.to is then not required either).
func TestNetworkPolicyOffByDefault(t *testing.T) {
	for _, values := range []string{requiredValues, requiredValues + "networkPolicy: {metricsFrom: [{ipBlock: {cidr: 10.0.0.0/8}}], egress: {enabled: true}}"} {
		if o := decode(t, mustRender(t, values)); len(o.networkPolicies) != 0 {
			t.Errorf("%d NetworkPolicies rendered with networkPolicy.enabled false:\n%s", len(o.networkPolicies), values)
		}
	}
}

// TestNetworkPolicy renders the policy for each combination of ingress
// peers and egress.
func TestNetworkPolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
	}{
		{"ingress from peers", []string{metricsPeers}},
		{"no peers", []string{"networkPolicy: {enabled: true}"}},
		{"no peers, egress", []string{egressRules}},
		{"peers and egress", []string{metricsPeers, egressRules}},
		{"names and pod labels", []string{metricsPeers, "nameOverride: relay\npodLabels: {team: orders}\nmetrics: {port: 9300}"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := append([]string{requiredValues}, tc.values...)
			o := decode(t, mustRender(t, values...))
			checkCounts(t, o, map[string]int{"Deployment": 1, "Service": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1, "NetworkPolicy": 1})
			checkNetworkPolicy(t, o, networkPolicyOf(t, values...))
		})
	}
}

// TestNetworkPolicySelectsMigrationJob pins the decision values.yaml
// documents: the hook Job's pods carry the selector labels, so the policy
// covers them as well; they serve nothing, so a closed ingress costs them
// nothing.
func TestNetworkPolicySelectsMigrationJob(t *testing.T) {
	o := decode(t, mustRender(t, readFile(t, fullValues)))
	if len(o.jobs) != 1 || len(o.networkPolicies) != 1 {
		t.Fatalf("%d Jobs, %d NetworkPolicies: want the migration hook and the policy", len(o.jobs), len(o.networkPolicies))
	}
	pod := o.jobs[0].Spec.Template
	if !labels.SelectorFromSet(o.networkPolicies[0].Spec.PodSelector.MatchLabels).Matches(labels.Set(pod.Labels)) {
		t.Errorf("the policy does not select the migration Job's pods (labels %v): update values.yaml's networkPolicy comment", pod.Labels)
	}
	for _, c := range pod.Spec.Containers {
		if len(c.Ports) != 0 {
			t.Errorf("migration container %s has ports %+v, which the policy closes", c.Name, c.Ports)
		}
	}
}

// TestNetworkPolicyInvalidValues: the schema refuses mistyped and misspelt
// networkPolicy values, and egress without rules fails the render.
func TestNetworkPolicyInvalidValues(t *testing.T) {
	for _, tc := range []struct {
		name, values, want string
	}{
		{"enabled not a boolean", `networkPolicy: {enabled: "yes"}`, "/networkPolicy/enabled"},
		{"metricsFrom not a list", "networkPolicy: {enabled: true, metricsFrom: {namespaceSelector: {}}}", "/networkPolicy/metricsFrom"},
		{"misspelt peer", "networkPolicy: {enabled: true, metricsFrom: [{namespaceSelecter: {}}]}", "namespaceSelecter"},
		{"empty peer", "networkPolicy: {enabled: true, metricsFrom: [{}]}", "/networkPolicy/metricsFrom/0"},
		{"ingress field in an egress rule", "networkPolicy: {enabled: true, egress: {enabled: true, to: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]}}", "from"},
		{"lower-case protocol", "networkPolicy: {enabled: true, egress: {enabled: true, to: [{ports: [{port: 5432, protocol: tcp}]}]}}", "/networkPolicy/egress/to/0/ports/0/protocol"},
		{"misspelt egress key", "networkPolicy: {enabled: true, egres: {enabled: true}}", "egres"},
		{"egress without rules", "networkPolicy: {enabled: true, egress: {enabled: true}}", "networkPolicy.egress.to is required with networkPolicy.egress.enabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, requiredValues, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("render: %v; want an error containing %q", err, tc.want)
			}
			if testing.Verbose() {
				t.Log(err)
			}
		})
	}
}
