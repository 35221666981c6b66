package relay

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestWithRegistererIsWithMetrics: the deprecated former name still
// compiles and sets what WithMetrics sets.
func TestWithRegistererIsWithMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	var viaOld, viaNew options
	WithRegisterer(reg).apply(&viaOld)
	WithMetrics(reg).apply(&viaNew)
	if viaOld.registerer != reg || viaNew.registerer != reg {
		t.Fatalf("WithRegisterer set %v, WithMetrics %v; want both %v", viaOld.registerer, viaNew.registerer, reg)
	}
}
