package helmtest

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// objects are the rendered objects, strict-decoded into their types.
type objects struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	serviceAccounts []corev1.ServiceAccount
	pdbs            []policyv1.PodDisruptionBudget
	jobs            []batchv1.Job
	networkPolicies []networkingv1.NetworkPolicy
	serviceMonitors []serviceMonitor
	prometheusRules []prometheusRule
}

// decode strict-decodes every document into the type its apiVersion and
// kind name: a field the type lacks (a misspelling, a wrong nesting) or a
// duplicate key fails, and so does a kind this test does not know.
func decode(t *testing.T, manifests map[string]string) objects {
	t.Helper()
	var o objects
	docs := documents(manifests)
	names := make([]string, 0, len(docs))
	for name := range docs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := o.add(docs[name]); err != nil {
			t.Errorf("%s: %v\n%s", name, err, docs[name])
		}
	}
	return o
}

func (o *objects) add(doc string) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return err
	}
	switch tm.APIVersion + "/" + tm.Kind {
	case "apps/v1/Deployment":
		return strictAppend(doc, &o.deployments)
	case "v1/Service":
		return strictAppend(doc, &o.services)
	case "v1/ServiceAccount":
		return strictAppend(doc, &o.serviceAccounts)
	case "policy/v1/PodDisruptionBudget":
		return strictAppend(doc, &o.pdbs)
	case "batch/v1/Job":
		return strictAppend(doc, &o.jobs)
	case "networking.k8s.io/v1/NetworkPolicy":
		return strictAppend(doc, &o.networkPolicies)
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return strictAppend(doc, &o.serviceMonitors)
	case "monitoring.coreos.com/v1/PrometheusRule":
		return strictAppend(doc, &o.prometheusRules)
	}
	return fmt.Errorf("kind %s %s: unknown to this test; add its k8s.io/api type to objects", tm.APIVersion, tm.Kind)
}

// strictAppend decodes doc into a new T as the API server does, and
// appends it.
func strictAppend[T any](doc string, to *[]T) error {
	var v T
	if err := strictDecode(doc, &v); err != nil {
		return err
	}
	*to = append(*to, v)
	return nil
}

// strictDecode decodes the YAML doc into v the way the API server decodes
// with fieldValidation=Strict: field names match case-sensitively
// (encoding/json alone would take readOnlyRootFileSystem for
// readOnlyRootFilesystem), and an unknown or duplicate field is an error.
func strictDecode(doc string, v any) error {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return fmt.Errorf("YAML: %w", err)
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("decode into %T: %w", v, err)
	}
	if err := errors.Join(strict...); err != nil {
		return fmt.Errorf("strict decode into %T: %w", v, err)
	}
	return nil
}

// The Prometheus Operator's types, reduced to the fields the chart sets
// (monitoring.coreos.com/v1), so this module does not depend on the
// operator. Strict decoding rejects any other field.
type (
	serviceMonitor struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              struct {
			Selector          metav1.LabelSelector `json:"selector"`
			NamespaceSelector struct {
				MatchNames []string `json:"matchNames"`
			} `json:"namespaceSelector"`
			Endpoints []struct {
				Port          string `json:"port"`
				Path          string `json:"path"`
				Interval      string `json:"interval"`
				ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	prometheusRule struct {
		metav1.TypeMeta   `json:",inline"`
		metav1.ObjectMeta `json:"metadata"`
		Spec              ruleFile `json:"spec"`
	}
	// ruleFile is a Prometheus rule file: alerts.yml, and a
	// PrometheusRule's spec.
	ruleFile struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	}
)

// TestStrictDecoding: the decoder the chart's objects go through refuses
// what the API server would: a misspelt, a wrongly cased, a misplaced or a
// duplicated field.
func TestStrictDecoding(t *testing.T) {
	const base = "apiVersion: v1\nkind: Service\nmetadata: {name: x}\n"
	var ok corev1.Service
	if err := strictDecode(base+"spec: {publishNotReadyAddresses: true}", &ok); err != nil || !ok.Spec.PublishNotReadyAddresses {
		t.Fatalf("a valid Service: %v", err)
	}
	for name, spec := range map[string]string{
		"misspelt":   "spec: {publishNotReadyAdresses: true}",
		"case":       "spec: {publishNotReadyaddresses: true}",
		"misplaced":  "spec: {ports: [{name: m, port: 1, containerPort: 1}]}",
		"duplicated": "spec: {type: ClusterIP, type: NodePort}",
	} {
		var svc corev1.Service
		if err := strictDecode(base+spec, &svc); err == nil {
			t.Errorf("%s field accepted: %s", name, spec)
		}
	}
}
