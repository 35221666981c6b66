package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/internal/schemareg"
)

// The adapter is what relay.New hands to schemareg.WithMetrics.
var _ schemareg.Metrics = SchemaRegistryClient{}

// TestSchemaRegistryClientCountsEachCall: every method of the adapter
// lands in its own series with the labels it was given, and in no other.
func TestSchemaRegistryClientCountsEachCall(t *testing.T) {
	r := New()
	c := r.SchemaRegistryClient()
	s := r.SchemaRegistry

	c.Request("subject_version", "ok", 3*time.Millisecond)
	c.Request("subject_version", "ok", 7*time.Millisecond)
	c.Request("schema_by_id", "transient", 2*time.Second)
	c.CacheLookup("schema_by_id", true)
	c.CacheLookup("schema_by_id", true)
	c.CacheLookup("schema_by_id", false)
	c.CacheLookup("schema_versions", false)
	c.StaleServed("subject_version")

	for _, tc := range []struct {
		name string
		got  float64
		want float64
	}{
		{`requests_total{subject_version,ok}`, testutil.ToFloat64(s.Requests.WithLabelValues("subject_version", "ok")), 2},
		{`requests_total{schema_by_id,transient}`, testutil.ToFloat64(s.Requests.WithLabelValues("schema_by_id", "transient")), 1},
		{`cache_lookups_total{schema_by_id,hit}`, testutil.ToFloat64(s.CacheLookups.WithLabelValues("schema_by_id", CacheHit)), 2},
		{`cache_lookups_total{schema_by_id,miss}`, testutil.ToFloat64(s.CacheLookups.WithLabelValues("schema_by_id", CacheMiss)), 1},
		{`cache_lookups_total{schema_versions,miss}`, testutil.ToFloat64(s.CacheLookups.WithLabelValues("schema_versions", CacheMiss)), 1},
		{`stale_served_total{subject_version}`, testutil.ToFloat64(s.StaleServed.WithLabelValues("subject_version")), 1},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Only the children touched above exist (the WithLabelValues calls of
	// the checks created none: they all named touched ones).
	for name, want := range map[string]int{
		"outbox_relay_schema_registry_requests_total":           2,
		"outbox_relay_schema_registry_cache_lookups_total":      3,
		"outbox_relay_schema_registry_stale_served_total":       1,
		"outbox_relay_schema_registry_request_duration_seconds": 2,
	} {
		if n, err := testutil.GatherAndCount(r.Registry, name); err != nil || n != want {
			t.Errorf("%s: %d series (%v), want %d", name, n, err, want)
		}
	}
	// The durations land in the buckets of their op, in seconds.
	want := `
# HELP outbox_relay_schema_registry_request_duration_seconds Duration of requests to the schema registry, whatever their outcome, by op.
# TYPE outbox_relay_schema_registry_request_duration_seconds histogram
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.001"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.0025"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.005"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.01"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.025"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.05"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.1"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.25"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="0.5"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="1"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="2.5"} 1
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="5"} 1
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="10"} 1
outbox_relay_schema_registry_request_duration_seconds_bucket{op="schema_by_id",le="+Inf"} 1
outbox_relay_schema_registry_request_duration_seconds_sum{op="schema_by_id"} 2
outbox_relay_schema_registry_request_duration_seconds_count{op="schema_by_id"} 1
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.001"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.0025"} 0
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.005"} 1
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.01"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.025"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.05"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.1"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.25"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="0.5"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="1"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="2.5"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="5"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="10"} 2
outbox_relay_schema_registry_request_duration_seconds_bucket{op="subject_version",le="+Inf"} 2
outbox_relay_schema_registry_request_duration_seconds_sum{op="subject_version"} 0.01
outbox_relay_schema_registry_request_duration_seconds_count{op="subject_version"} 2
`
	if err := testutil.GatherAndCompare(r.Registry, strings.NewReader(want), "outbox_relay_schema_registry_request_duration_seconds"); err != nil {
		t.Error(err)
	}
}

// TestSchemaRegistrySeriesAreExported: the four series are registered
// with the relay's other collectors (so /metrics, the dashboard check and
// the docs see them), with their bounded labels only.
func TestSchemaRegistrySeriesAreExported(t *testing.T) {
	labels := exportedLabels(t)
	for name, want := range map[string][]string{
		"outbox_relay_schema_registry_requests_total":                  {"op", "outcome"},
		"outbox_relay_schema_registry_request_duration_seconds_bucket": {"op"},
		"outbox_relay_schema_registry_request_duration_seconds_sum":    {"op"},
		"outbox_relay_schema_registry_request_duration_seconds_count":  {"op"},
		"outbox_relay_schema_registry_cache_lookups_total":             {"op", "result"},
		"outbox_relay_schema_registry_stale_served_total":              {"op"},
	} {
		got, ok := labels[name]
		if !ok {
			t.Errorf("%s is not exported", name)
			continue
		}
		if len(got) != len(want) {
			t.Errorf("%s has labels %v, want %v", name, keys(got), want)
		}
		for _, l := range want {
			if !got[l] {
				t.Errorf("%s lacks label %s (has %v)", name, l, keys(got))
			}
		}
	}
	// A relay that never looked a schema up exports none of them: the
	// other formats have no registry client.
	fams, err := New().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "outbox_relay_schema_registry_") {
			t.Errorf("%s exported before any lookup", f.GetName())
		}
	}
}
