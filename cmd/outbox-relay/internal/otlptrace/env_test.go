package otlptrace

import (
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "a=1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "b=2")
	t.Setenv("OTEL_SERVICE_NAME", "")
	cfg, err := FromEnv("http://127.0.0.1:4318", "svc", "v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoint != "http://127.0.0.1:4318/v1/traces" || cfg.Headers["b"] != "2" || cfg.Headers["a"] != "" ||
		cfg.Resource[0].Value.AsString() != "svc" || cfg.Resource[1].Value.AsString() != "v1" {
		t.Fatalf("config %+v", cfg)
	}
	t.Setenv("OTEL_SERVICE_NAME", "shipping")
	if cfg, _ := FromEnv("http://127.0.0.1:4318", "svc", "v1", nil); cfg.Resource[0].Value.AsString() != "shipping" {
		t.Fatalf("OTEL_SERVICE_NAME not used: %+v", cfg.Resource)
	}
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "novalue")
	if _, err := FromEnv("http://127.0.0.1:4318", "svc", "v1", nil); err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_HEADERS") {
		t.Fatalf("bad headers: %v", err)
	}
}
