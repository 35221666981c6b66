package relay

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outbox-relay/outbox-relay/record"
)

// TestSchemaRegistryReportsToTheRelaysMetrics: the registry client New
// builds for a registry format counts its requests and cache lookups in
// the relay's collectors (issue 48), so /metrics shows them.
func TestSchemaRegistryReportsToTheRelaysMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/schemas/ids/7/versions" {
			http.NotFound(w, req)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write([]byte(`[{"subject":"orders-value","version":1}]`))
	}))
	defer srv.Close()
	cfg := DefaultConfig()
	cfg.Database.URL, cfg.Kafka.Brokers = "postgres://u@h:5432/db", []string{"k:9092"}
	cfg.Publish.Record.Format = record.FormatAvro
	cfg.Publish.Record.Registry.URL = srv.URL
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r.schemas == nil {
		t.Fatal("no registry client for the avro format")
	}
	for range 2 { // a miss and a request, then a hit
		if ok, err := r.schemas.Registered(context.Background(), "orders-value", 7); err != nil || !ok {
			t.Fatalf("Registered: %v, %v", ok, err)
		}
	}
	s := r.m.SchemaRegistry
	if n := testutil.ToFloat64(s.Requests.WithLabelValues("schema_versions", "ok")); n != 1 {
		t.Errorf("outbox_relay_schema_registry_requests_total{op=schema_versions,outcome=ok} = %v, want 1", n)
	}
	for result, want := range map[string]float64{"hit": 1, "miss": 1} {
		if n := testutil.ToFloat64(s.CacheLookups.WithLabelValues("schema_versions", result)); n != want {
			t.Errorf("outbox_relay_schema_registry_cache_lookups_total{op=schema_versions,result=%s} = %v, want %v", result, n, want)
		}
	}
	if n, err := testutil.GatherAndCount(r.m.Registry, "outbox_relay_schema_registry_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("request duration: %d series (%v), want 1", n, err)
	}
}
