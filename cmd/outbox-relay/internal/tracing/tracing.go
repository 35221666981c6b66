// Package tracing starts the binary's OpenTelemetry SDK for
// --trace-publish: a TracerProvider with a batch span processor and the
// OTLP/HTTP exporter (go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp),
// which read the standard OTEL_* variables themselves.
//
// The SDK lives here, under cmd/, and nowhere else: the libraries depend
// on the OpenTelemetry API only (internal/apicheck fails if one links the
// SDK), and Go's module graph pruning keeps the SDK's packages out of the
// programs that import outbox, inbox or relay.
//
// What this package adds to the SDK is what the SDK does not do at
// start-up: it reports a bad endpoint, header list, protocol, sampler or
// certificate as an error (the SDK logs them and carries on with a
// default: spans to localhost, a header dropped, every root span
// sampled), and it never names a header's value (the SDK's own message
// for a malformed header quotes it).
package tracing

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Settings are the binary's own tracing settings; everything else comes
// from the OTEL_* variables.
type Settings struct {
	// Endpoint is --otlp-endpoint; "" leaves it to
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string
	// Service is service.name unless OTEL_SERVICE_NAME (or
	// OTEL_RESOURCE_ATTRIBUTES) names one; Version is service.version.
	Service, Version string
}

// endpoint is where the spans go: the traces URL, and the setting it came
// from (for messages). ok is false when nothing names an endpoint. Each
// source has its rule for the path, the flag's its own documented one
// and the variables' the OpenTelemetry specification's.
func (s Settings) endpoint() (u *url.URL, from string, ok bool, err error) {
	for _, src := range []struct {
		name  string
		value string
		path  func(string) string
	}{
		{"--otlp-endpoint", s.Endpoint, func(p string) string { // the traces path unless it names one
			if p == "" || p == "/" {
				return "/v1/traces"
			}
			return p
		}},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), func(p string) string { // as it is
			if p == "" {
				return "/"
			}
			return p
		}},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), func(p string) string { // a base URL
			return path.Join(p, "/v1/traces")
		}},
	} {
		if src.value == "" {
			continue
		}
		u, err := parseEndpoint(src.value)
		if err != nil {
			return nil, src.name, true, err
		}
		u.Path = src.path(u.Path)
		return u, src.name, true, nil
	}
	return nil, "", false, nil
}

// HasEndpoint reports whether s or the environment names an endpoint
// (valid or not: Check says which).
func (s Settings) HasEndpoint() bool {
	_, _, ok, _ := s.endpoint()
	return ok
}

// URL is the traces URL the spans go to, fit to print (parseEndpoint
// refuses credentials and queries), and the setting it came from.
func (s Settings) URL() (string, string) {
	u, from, _, err := s.endpoint()
	if err != nil || u == nil {
		return "", from
	}
	return u.String(), from
}

// parseEndpoint accepts an OTLP/HTTP URL. Its errors never quote raw
// (url.Parse's do): user:password@ is a mistake this refuses, and the
// password must not show in the message that says so.
func parseEndpoint(raw string) (*url.URL, error) {
	const want = "want http://host:port or https://host:port (OTLP/HTTP, e.g. a collector's port 4318)"
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, errors.New("not a URL: " + want)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		return nil, errors.New(want)
	case u.User != nil:
		return nil, fmt.Errorf("%s://%s: credentials in the URL are not sent (the exporter drops them); put them in OTEL_EXPORTER_OTLP_HEADERS, e.g. Authorization=Basic%%20<base64 of user:password>", u.Scheme, u.Host)
	case u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return nil, fmt.Errorf("%s://%s%s: a query or fragment is not sent (the exporter drops it); put a key in OTEL_EXPORTER_OTLP_HEADERS", u.Scheme, u.Host, u.Path)
	}
	return u, nil
}

// CheckEndpoint validates the endpoint alone.
func (s Settings) CheckEndpoint() error {
	if _, from, _, err := s.endpoint(); err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	return nil
}

// Check validates the settings and the OTEL_* variables the SDK would
// otherwise only log about. Its errors name the setting, never a header's
// value.
func (s Settings) Check() []error {
	var errs []error
	if err := s.CheckEndpoint(); err != nil {
		errs = append(errs, err)
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		// The SDK parses them even when --otlp-endpoint wins, and its
		// message for one it cannot parse quotes it, password and all.
		if _, err := url.Parse(os.Getenv(name)); err != nil && s.Endpoint != "" {
			errs = append(errs, fmt.Errorf("%s: not a URL (--otlp-endpoint wins, but the exporter reads it)", name))
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if v, ok := os.LookupEnv(name); ok {
			if _, err := parseHeaders(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		// The SDK sends http/protobuf for grpc (with a warning) and for
		// any value it does not know.
		if v, ok := os.LookupEnv(name); ok && v != "http/protobuf" && v != "http/json" {
			errs = append(errs, fmt.Errorf("%s=%s: the binary exports OTLP/HTTP only: http/protobuf (the default) or http/json", name, v))
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"} {
		if v, ok := os.LookupEnv(name); ok && v != "gzip" && v != "none" {
			errs = append(errs, fmt.Errorf("%s=%s: want gzip or none", name, v))
		}
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
		"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"} {
		if v, ok := os.LookupEnv(name); ok {
			if n, err := strconv.Atoi(v); err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("%s=%s: want a positive whole number (of milliseconds, or spans for the sizes)", name, v))
			}
		}
	}
	if err := checkSampler(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkCertificates()...)
	if _, err := s.resource(context.Background()); err != nil {
		errs = append(errs, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err))
	}
	return errs
}

// parseHeaders reads the headers variables the way the SDK does
// (comma-separated key=value, values URL-decoded), minus its messages,
// which quote a malformed entry: that entry is usually a credential.
func parseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for i, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || !token(k) {
			return nil, fmt.Errorf("entry %d: want key=value[,key=value...] with a header name as the key (the value is not shown)", i+1)
		}
		uv, err := url.PathUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("header %s: the value is not URL-encoded (%%XX escapes; it is not shown)", k)
		}
		h[k] = strings.TrimSpace(uv)
	}
	return h, nil
}

// token reports whether k is an HTTP header name (RFC 9110's token), as
// the SDK checks it.
func token(k string) bool {
	for _, c := range k {
		if c > unicode.MaxASCII || !unicode.IsLetter(c) && !unicode.IsDigit(c) && !strings.ContainsRune("!#$%&'*+-.^_`|~", c) {
			return false
		}
	}
	return k != ""
}

// HeaderSecrets are the header values of the environment, as they are
// sent and as they are written, and the credential of an
// "Authorization: Bearer <token>" value alone: the binary's log writer
// masks them, in case anything (the SDK, a collector's error body) echoes
// one.
func HeaderSecrets() []string {
	var s []string
	for _, name := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		v, ok := os.LookupEnv(name)
		if !ok {
			continue
		}
		for _, kv := range strings.Split(v, ",") {
			_, raw, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			s = append(s, strings.TrimSpace(raw))
			if dec, err := url.PathUnescape(raw); err == nil {
				dec = strings.TrimSpace(dec)
				s = append(s, dec)
				if _, cred, ok := strings.Cut(dec, " "); ok { // scheme and credential
					s = append(s, strings.TrimSpace(cred))
				}
			}
		}
	}
	return s
}

// checkSampler accepts what the SDK's OTEL_TRACES_SAMPLER supports; the
// SDK falls back to sampling every root for anything else.
func checkSampler() error {
	name, _ := os.LookupEnv("OTEL_TRACES_SAMPLER")
	switch strings.ToLower(strings.TrimSpace(name)) {
	case "", "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
		return nil
	case "traceidratio", "parentbased_traceidratio":
		arg, ok := os.LookupEnv("OTEL_TRACES_SAMPLER_ARG")
		if !ok || strings.TrimSpace(arg) == "" {
			return nil // 1.0
		}
		if r, err := strconv.ParseFloat(strings.TrimSpace(arg), 64); err != nil || r < 0 || r > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%s: want a ratio from 0 to 1", arg)
		}
		return nil
	}
	return fmt.Errorf("OTEL_TRACES_SAMPLER=%s: want parentbased_always_off (the default), parentbased_always_on, parentbased_traceidratio, always_on, always_off or traceidratio", name)
}

// checkCertificates loads the TLS files the variables name, as the SDK
// will: it would log a missing or bad one and connect without it.
func checkCertificates() []error {
	var errs []error
	for _, name := range []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"} {
		if f, ok := os.LookupEnv(name); ok && f != "" {
			b, err := os.ReadFile(f)
			if err == nil && !x509.NewCertPool().AppendCertsFromPEM(b) {
				err = errors.New("no PEM certificate in it")
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
			}
		}
	}
	for _, prefix := range []string{"OTEL_EXPORTER_OTLP_", "OTEL_EXPORTER_OTLP_TRACES_"} {
		cert, okc := os.LookupEnv(prefix + "CLIENT_CERTIFICATE")
		key, okk := os.LookupEnv(prefix + "CLIENT_KEY")
		if !okc && !okk {
			continue
		}
		if _, err := tls.LoadX509KeyPair(cert, key); err != nil {
			errs = append(errs, fmt.Errorf("%sCLIENT_CERTIFICATE and %sCLIENT_KEY: %w", prefix, prefix, err))
		}
	}
	return errs
}

// resource describes the process: service.name and service.version, then
// OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME (which win), and the
// SDK's telemetry.sdk.* attributes.
func (s Settings) resource(ctx context.Context) (*resource.Resource, error) {
	return resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", s.Service), attribute.String("service.version", s.Version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK())
}

// The batch span processor's defaults when OTEL_BSP_* does not set them:
// a larger queue and a shorter delay than the SDK's (2048 spans, 5 s),
// for a relay that emits a span per event.
const (
	defaultQueueSize = 8192
	defaultDelay     = time.Second
)

// Provider is the running SDK. Shutdown flushes it.
type Provider struct {
	*sdktrace.TracerProvider
	count *counter
}

// Start starts the SDK: spans are recorded when the producer's trace was
// sampled (parent-based, no roots) unless OTEL_TRACES_SAMPLER says
// otherwise, batched and sent to the endpoint. The SDK's own messages
// (export failures) go to log. Check the settings first: Start assumes
// they are valid.
func Start(ctx context.Context, s Settings, log *slog.Logger) (*Provider, error) {
	// The SDK reports through the process-wide handler and logger, which
	// default to the standard log package on stderr: unstructured and past
	// the binary's redacting writer. They are the binary's, so it sets them.
	otel.SetLogger(logr.FromSlogHandler(log.With(slog.String("stage", "tracing")).Handler()))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("the OpenTelemetry SDK reported an error", slog.String("stage", "tracing"), slog.Any("error", err))
	}))

	var opts []otlptracehttp.Option
	if s.Endpoint != "" {
		u, _, _, err := s.endpoint()
		if err != nil {
			return nil, fmt.Errorf("--otlp-endpoint: %w", err)
		}
		opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := s.resource(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	var bsp []sdktrace.BatchSpanProcessorOption
	if _, ok := os.LookupEnv("OTEL_BSP_MAX_QUEUE_SIZE"); !ok {
		bsp = append(bsp, sdktrace.WithMaxQueueSize(defaultQueueSize))
	}
	if _, ok := os.LookupEnv("OTEL_BSP_SCHEDULE_DELAY"); !ok {
		bsp = append(bsp, sdktrace.WithBatchTimeout(defaultDelay))
	}
	c := &counter{}
	tpOpts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(c),
		sdktrace.WithBatcher(countingExporter{exp, c}, bsp...),
	}
	if name, _ := os.LookupEnv("OTEL_TRACES_SAMPLER"); strings.TrimSpace(name) == "" {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample())))
	}
	return &Provider{TracerProvider: sdktrace.NewTracerProvider(tpOpts...), count: c}, nil
}

// Dropped is how many sampled spans ended and were not exported (the
// queue was full, an export failed, or Shutdown ran out of time). The SDK
// counts queue drops only for its debug log; the relay warns at shutdown.
func (p *Provider) Dropped() uint64 {
	return p.count.ended.Load() - min(p.count.ended.Load(), p.count.exported.Load())
}

// counter counts the sampled spans that end (a span processor beside the
// batcher) and those exported (countingExporter).
type counter struct {
	ended, exported atomic.Uint64
}

func (c *counter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c *counter) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.SpanContext().IsSampled() {
		c.ended.Add(1)
	}
}
func (c *counter) Shutdown(context.Context) error   { return nil }
func (c *counter) ForceFlush(context.Context) error { return nil }

// countingExporter is the OTLP exporter, counting what it sent.
type countingExporter struct {
	sdktrace.SpanExporter
	c *counter
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		e.c.exported.Add(uint64(len(spans)))
	}
	return err
}
