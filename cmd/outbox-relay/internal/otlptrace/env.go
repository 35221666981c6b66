package otlptrace

import (
	"fmt"
	"log/slog"
	"os"

	"go.opentelemetry.io/otel/attribute"
)

// FromEnv is the Config of an exporter to endpoint (a URL; /v1/traces is
// added when it has no path), completed from the standard variables the
// OpenTelemetry exporters read: OTEL_EXPORTER_OTLP_TRACES_HEADERS (else
// OTEL_EXPORTER_OTLP_HEADERS) for the request headers and
// OTEL_SERVICE_NAME (default defaultService) for service.name. Keeping
// this here, not in the binary, lets every program that embeds the
// exporter configure it the same way.
func FromEnv(endpoint, defaultService, version string, log *slog.Logger) (Config, error) {
	url, err := Endpoint(endpoint)
	if err != nil {
		return Config{}, err
	}
	headers, err := ParseHeaders(envHeaders())
	if err != nil {
		return Config{}, fmt.Errorf("OTEL_EXPORTER_OTLP_HEADERS: %w", err)
	}
	service := os.Getenv("OTEL_SERVICE_NAME")
	if service == "" {
		service = defaultService
	}
	return Config{
		Endpoint: url, Headers: headers, Logger: log,
		Resource: []attribute.KeyValue{
			attribute.String("service.name", service),
			attribute.String("service.version", version),
		},
	}, nil
}

// envHeaders is the standard variable of the exporters' request headers
// (the traces-specific one wins).
func envHeaders() string {
	if h, ok := os.LookupEnv("OTEL_EXPORTER_OTLP_TRACES_HEADERS"); ok {
		return h
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_HEADERS")
}
