package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/redact"
)

// unsetOTEL clears the OTEL_ variables of the process for the test.
func unsetOTEL(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "OTEL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

// TestTraceFlags: --trace-publish needs an endpoint, from --otlp-endpoint
// or the standard OTEL_EXPORTER_OTLP_ENDPOINT; a bad one, or a bad
// OTEL_* variable the SDK would only log about, is a configuration error
// that names the setting.
func TestTraceFlags(t *testing.T) {
	baseEnv(t)
	for _, c := range []struct {
		args []string
		env  map[string]string
		want string // in the error; "" for none
	}{
		{[]string{"--trace-publish"}, nil, "--trace-publish needs --otlp-endpoint or OTEL_EXPORTER_OTLP_ENDPOINT"},
		{[]string{"--trace-publish", "--otlp-endpoint", "http://127.0.0.1:4318"}, nil, ""},
		{[]string{"--trace-publish"}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, ""},
		{[]string{"--trace-publish"}, map[string]string{"OUTBOX_RELAY_OTLP_ENDPOINT": "http://collector:4318"}, ""},
		{[]string{"--otlp-endpoint", "collector:4318"}, nil, "--otlp-endpoint: want http://host:port"},
		{[]string{"--trace-publish", "--otlp-endpoint", "grpc://collector:4317"}, nil, "--otlp-endpoint: want http://host:port"},
		{[]string{"--trace-publish", "--otlp-endpoint", "http://c:4318"}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP/HTTP only"},
		// Unused without --trace-publish: not checked.
		{[]string{"--otlp-endpoint", "http://c:4318"}, map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, ""},
	} {
		unsetOTEL(t)
		os.Unsetenv("OUTBOX_RELAY_OTLP_ENDPOINT")
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		_, err := parse("run", c.args, &bytes.Buffer{})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v %v: %v", c.args, c.env, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v %v: %v, want %q", c.args, c.env, err, c.want)
		}
	}
}

// TestOTLPHeaderSecretsNeverPrinted: a malformed OTEL_EXPORTER_OTLP_HEADERS
// fails the command without showing its value, and a valid one's values
// are registered for masking (a collector's answer may echo a token into
// an export error the SDK reports).
func TestOTLPHeaderSecretsNeverPrinted(t *testing.T) {
	baseEnv(t)
	unsetOTEL(t)
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization Bearer otlp-tok-9")
	var out, errOut bytes.Buffer
	if code := run([]string{"run", "--trace-publish", "--otlp-endpoint", "http://127.0.0.1:4318"}, &out, &errOut); code != 2 ||
		!strings.Contains(errOut.String(), "OTEL_EXPORTER_OTLP_HEADERS") || strings.Contains(errOut.String(), "otlp-tok-9") {
		t.Fatalf("exit %d, stderr: %s", code, errOut.String())
	}
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20otlp-tok-9,x-api-key=otlp-key-9")
	var buf bytes.Buffer
	rw := redact.NewWriter(&buf)
	if _, err := parse("run", []string{"--trace-publish", "--otlp-endpoint", "http://127.0.0.1:4318"}, rw); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(rw, "401 (body: invalid token otlp-tok-9, key otlp-key-9)\n")
	if strings.Contains(buf.String(), "-9") {
		t.Errorf("not masked: %s", buf.String())
	}
}
