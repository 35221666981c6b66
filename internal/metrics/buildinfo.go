package metrics

import (
	"github.com/outbox-relay/outbox-relay/internal/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
)

// newBuildInfo returns outbox_relay_build_info{version,revision,goversion},
// set to 1. The labels are constant for the process, so they are const
// labels of a plain gauge rather than a vector with one child.
func newBuildInfo(i buildinfo.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1; the labels name the running build: version, VCS revision and the Go version that built it.",
		ConstLabels: prometheus.Labels{
			"version":   i.Version,
			"revision":  i.Revision,
			"goversion": i.GoVersion,
		},
	})
	g.Set(1)
	return g
}
