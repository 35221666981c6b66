package inboxprom

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRegistrySeries: the consumer's registry client is exported as the
// relay's outbox_relay_schema_registry_* are, under the inbox's prefix
// and with the consumer label.
func TestRegistrySeries(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m := New(reg)
	m.RegistryRequest("shipping", "schema_by_id", "ok", 3*time.Millisecond)
	m.RegistryRequest("shipping", "schema_by_id", "transient", time.Second)
	m.RegistryCacheLookup("shipping", "schema_by_id", false)
	m.RegistryCacheLookup("shipping", "schema_by_id", true)
	m.RegistryCacheLookup("shipping", "schema_by_id", true)

	want := `
# HELP outbox_relay_inbox_schema_registry_cache_lookups_total Lookups of the schema registry client's cache, by op and result: hit (answered from the cache) or miss (passed on to the registry).
# TYPE outbox_relay_inbox_schema_registry_cache_lookups_total counter
outbox_relay_inbox_schema_registry_cache_lookups_total{consumer="shipping",op="schema_by_id",result="hit"} 2
outbox_relay_inbox_schema_registry_cache_lookups_total{consumer="shipping",op="schema_by_id",result="miss"} 1
# HELP outbox_relay_inbox_schema_registry_requests_total Requests to the schema registry, by op (schema_by_id, subject_version) and outcome (ok, not_found, invalid, transient, unauthorized).
# TYPE outbox_relay_inbox_schema_registry_requests_total counter
outbox_relay_inbox_schema_registry_requests_total{consumer="shipping",op="schema_by_id",outcome="ok"} 1
outbox_relay_inbox_schema_registry_requests_total{consumer="shipping",op="schema_by_id",outcome="transient"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"outbox_relay_inbox_schema_registry_cache_lookups_total", "outbox_relay_inbox_schema_registry_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(m.regSeconds, "outbox_relay_inbox_schema_registry_request_duration_seconds"); n != 1 {
		t.Errorf("%d duration series, want 1 (consumer, op)", n)
	}
}
