// Package helmtest renders the Helm chart in deploy/helm/outbox-relay with
// Helm's own Go packages, no cluster needed, and checks the result against
// what the binary accepts: every rendered object strict-decodes into its
// k8s.io/api type (a misspelt field fails), the probes hit the relay's real
// endpoints, and every OUTBOX_RELAY_* variable is one docs/configuration.md
// (generated from the binary's flags) lists, with a value the binary's own
// parser for its flag type (internal/envflag) accepts.
//
// It is its own module (deploy/go.mod), so Helm and the Kubernetes API
// types stay out of the relay's go.mod. Run: cd deploy && go test ./...
package helmtest
