package helmtest

import "testing"

// alertsFile is the project's alerting rules; the chart can only read
// files inside itself, so it carries a copy.
const (
	alertsFile = "../prometheus/alerts.yml"
	alertsCopy = "../helm/outbox-relay/files/alerts.yml"
)

// TestAlertsCopy: the chart's PrometheusRule carries exactly the project's
// alerts.
func TestAlertsCopy(t *testing.T) {
	if readFile(t, alertsCopy) != readFile(t, alertsFile) {
		t.Errorf("deploy/helm/outbox-relay/files/alerts.yml differs from deploy/prometheus/alerts.yml; sync it from the repository root with:\n\tcp deploy/prometheus/alerts.yml deploy/helm/outbox-relay/files/alerts.yml")
	}
}
