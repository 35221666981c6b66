package otlptrace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// Endpoint turns an OTLP/HTTP base URL into the traces URL the way the
// OpenTelemetry exporters read OTEL_EXPORTER_OTLP_ENDPOINT: a URL without
// a path (or "/") gets /v1/traces, one with a path is used as it is.
func Endpoint(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("OTLP endpoint %q: %w", raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("OTLP endpoint %q: want http://host:port or https://host:port (OTLP/HTTP, e.g. a collector's port 4318)", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// ParseHeaders reads OTEL_EXPORTER_OTLP_HEADERS' format: comma-separated
// key=value pairs with URL-encoded values.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, errors.New("OTLP headers: want key=value[,key=value...]")
		}
		uv, err := url.QueryUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("OTLP header %q: %w", k, err)
		}
		h[k] = uv
	}
	return h, nil
}

// exporter posts ExportTraceServiceRequest messages.
type exporter struct {
	url      string
	headers  map[string]string
	resource []attribute.KeyValue
	timeout  time.Duration
	client   *http.Client
	buf      []byte
}

func newExporter(cfg Config) *exporter {
	return &exporter{url: cfg.Endpoint, headers: cfg.Headers, resource: cfg.Resource, timeout: cfg.Timeout, client: &http.Client{}}
}

// export sends spans in one request, retrying what OTLP calls retryable
// (429, 502, 503, 504 and transport errors) with backoff within Timeout.
func (e *exporter) export(spans []*span) error {
	e.buf = appendRequest(e.buf[:0], e.resource, spans)
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		retry, err := e.post(ctx, e.buf)
		if err == nil || !retry {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up after %s)", err, e.timeout)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (e *exporter) post(ctx context.Context, body []byte) (retry bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	for k, v := range e.headers {
		req.Header.Set(k, v)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return true, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode == http.StatusBadGateway,
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusGatewayTimeout:
		return true, fmt.Errorf("OTLP endpoint %s: %s", e.url, resp.Status)
	}
	return false, fmt.Errorf("OTLP endpoint %s: %s", e.url, resp.Status)
}

// The OTLP protobuf field numbers (opentelemetry/proto/collector/trace/v1,
// trace/v1, common/v1, resource/v1).
const (
	fRequestResourceSpans = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   = 1 // ResourceSpans.resource
	fResourceSpansScopeSpans = 2 // ResourceSpans.scope_spans
	fResourceAttributes      = 1 // Resource.attributes

	fScopeSpansScope     = 1 // ScopeSpans.scope
	fScopeSpansSpans     = 2 // ScopeSpans.spans
	fScopeSpansSchemaURL = 3 // ScopeSpans.schema_url
	fScopeName           = 1 // InstrumentationScope.name
	fScopeVersion        = 2 // InstrumentationScope.version

	fSpanTraceID      = 1
	fSpanSpanID       = 2
	fSpanTraceState   = 3
	fSpanParentSpanID = 4
	fSpanName         = 5
	fSpanKind         = 6
	fSpanStart        = 7
	fSpanEnd          = 8
	fSpanAttributes   = 9
	fSpanEvents       = 11
	fSpanLinks        = 13
	fSpanStatus       = 15
	fSpanFlags        = 16

	fEventTime       = 1
	fEventName       = 2
	fEventAttributes = 3

	fLinkTraceID    = 1
	fLinkSpanID     = 2
	fLinkTraceState = 3
	fLinkAttributes = 4
	fLinkFlags      = 6

	fStatusMessage = 2
	fStatusCode    = 3

	fKeyValueKey   = 1
	fKeyValueValue = 2

	fAnyString = 1
	fAnyBool   = 2
	fAnyInt    = 3
	fAnyDouble = 4
	fAnyArray  = 5
	fArrayVals = 1 // ArrayValue.values

	// SpanFlags: the low byte is the W3C trace flags; these say whether
	// the parent (or the linked span) is remote.
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// appendRequest encodes one ExportTraceServiceRequest: one resource, its
// spans grouped by scope in order of first appearance.
func appendRequest(b []byte, resource []attribute.KeyValue, spans []*span) []byte {
	var scopes []*scope
	seen := map[*scope]bool{}
	for _, s := range spans {
		if !seen[s.scope] {
			seen[s.scope] = true
			scopes = append(scopes, s.scope)
		}
	}
	return appendMessage(b, fRequestResourceSpans, func(b []byte) []byte {
		b = appendMessage(b, fResourceSpansResource, func(b []byte) []byte {
			return appendAttributes(b, fResourceAttributes, resource)
		})
		for _, sc := range scopes {
			b = appendMessage(b, fResourceSpansScopeSpans, func(b []byte) []byte {
				b = appendMessage(b, fScopeSpansScope, func(b []byte) []byte {
					b = appendString(b, fScopeName, sc.name)
					return appendString(b, fScopeVersion, sc.version)
				})
				for _, s := range spans {
					if s.scope == sc {
						b = appendMessage(b, fScopeSpansSpans, s.appendTo)
					}
				}
				return appendString(b, fScopeSpansSchemaURL, sc.schemaURL)
			})
		}
		return b
	})
}

// appendTo encodes the span (a Span message body). The span has ended:
// nothing changes it any more.
func (s *span) appendTo(b []byte) []byte {
	tid, sid := s.sc.TraceID(), s.sc.SpanID()
	b = appendBytes(b, fSpanTraceID, tid[:])
	b = appendBytes(b, fSpanSpanID, sid[:])
	b = appendString(b, fSpanTraceState, s.sc.TraceState().String())
	if s.parent.IsValid() {
		psid := s.parent.SpanID()
		b = appendBytes(b, fSpanParentSpanID, psid[:])
	}
	b = appendString(b, fSpanName, s.name)
	if s.kind != trace.SpanKindUnspecified {
		b = protowire.AppendTag(b, fSpanKind, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(s.kind)) // the API's values are OTLP's
	}
	b = appendFixed64(b, fSpanStart, uint64(s.start.UnixNano()))
	b = appendFixed64(b, fSpanEnd, uint64(s.end.UnixNano()))
	b = appendAttributes(b, fSpanAttributes, s.attrs)
	for _, e := range s.events {
		b = appendMessage(b, fSpanEvents, func(b []byte) []byte {
			at := e.at
			if at.IsZero() {
				at = s.end
			}
			b = appendFixed64(b, fEventTime, uint64(at.UnixNano()))
			b = appendString(b, fEventName, e.name)
			return appendAttributes(b, fEventAttributes, e.attrs)
		})
	}
	for _, l := range s.links {
		b = appendMessage(b, fSpanLinks, func(b []byte) []byte {
			ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
			b = appendBytes(b, fLinkTraceID, ltid[:])
			b = appendBytes(b, fLinkSpanID, lsid[:])
			b = appendString(b, fLinkTraceState, l.SpanContext.TraceState().String())
			b = appendAttributes(b, fLinkAttributes, l.Attributes)
			return appendFixed32(b, fLinkFlags, spanFlags(l.SpanContext))
		})
	}
	if s.status != codes.Unset {
		b = appendMessage(b, fSpanStatus, func(b []byte) []byte {
			b = appendString(b, fStatusMessage, s.statusMsg)
			code := uint64(1) // STATUS_CODE_OK
			if s.status == codes.Error {
				code = 2 // STATUS_CODE_ERROR
			}
			b = protowire.AppendTag(b, fStatusCode, protowire.VarintType)
			return protowire.AppendVarint(b, code)
		})
	}
	flags := uint32(s.sc.TraceFlags()) | flagHasIsRemote
	if s.parent.IsRemote() {
		flags |= flagIsRemote
	}
	return appendFixed32(b, fSpanFlags, flags)
}

// spanFlags are a linked span context's flags field.
func spanFlags(sc trace.SpanContext) uint32 {
	f := uint32(sc.TraceFlags()) | flagHasIsRemote
	if sc.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

func appendAttributes(b []byte, field protowire.Number, kvs []attribute.KeyValue) []byte {
	for _, kv := range kvs {
		if !kv.Valid() {
			continue
		}
		b = appendMessage(b, field, func(b []byte) []byte {
			b = appendString(b, fKeyValueKey, string(kv.Key))
			return appendMessage(b, fKeyValueValue, func(b []byte) []byte { return appendValue(b, kv.Value) })
		})
	}
	return b
}

// appendValue encodes an AnyValue body.
func appendValue(b []byte, v attribute.Value) []byte {
	switch v.Type() {
	case attribute.BOOL:
		b = protowire.AppendTag(b, fAnyBool, protowire.VarintType)
		return protowire.AppendVarint(b, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
		return protowire.AppendVarint(b, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		return appendFixed64(b, fAnyDouble, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		// Written even when empty: an AnyValue without a value is "unset".
		b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
		return protowire.AppendString(b, v.AsString())
	case attribute.BOOLSLICE:
		return appendArray(b, len(v.AsBoolSlice()), func(i int) attribute.Value { return attribute.BoolValue(v.AsBoolSlice()[i]) })
	case attribute.INT64SLICE:
		return appendArray(b, len(v.AsInt64Slice()), func(i int) attribute.Value { return attribute.Int64Value(v.AsInt64Slice()[i]) })
	case attribute.FLOAT64SLICE:
		return appendArray(b, len(v.AsFloat64Slice()), func(i int) attribute.Value { return attribute.Float64Value(v.AsFloat64Slice()[i]) })
	case attribute.STRINGSLICE:
		return appendArray(b, len(v.AsStringSlice()), func(i int) attribute.Value { return attribute.StringValue(v.AsStringSlice()[i]) })
	}
	// Other kinds (none the relay uses) travel as their string form.
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, v.String())
}

func appendArray(b []byte, n int, at func(int) attribute.Value) []byte {
	return appendMessage(b, fAnyArray, func(b []byte) []byte {
		for i := range n {
			b = appendMessage(b, fArrayVals, func(b []byte) []byte { return appendValue(b, at(i)) })
		}
		return b
	})
}

// appendMessage appends field as an embedded message written by body,
// with its length prefix: the body is written after a one-byte length
// guess and moved when the length needs more bytes.
func appendMessage(b []byte, field protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	at := len(b)
	b = append(b, 0)
	b = body(b)
	n := len(b) - at - 1
	if w := protowire.SizeVarint(uint64(n)); w > 1 {
		b = append(b, make([]byte, w-1)...)
		copy(b[at+w:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendFixed64(b []byte, field protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, field, protowire.Fixed64Type)
	return protowire.AppendFixed64(b, v)
}

func appendFixed32(b []byte, field protowire.Number, v uint32) []byte {
	b = protowire.AppendTag(b, field, protowire.Fixed32Type)
	return protowire.AppendFixed32(b, v)
}

// errorType names err's type for exception.type.
func errorType(err error) string { return fmt.Sprintf("%T", err) }
