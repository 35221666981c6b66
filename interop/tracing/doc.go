// Package tracing holds the end-to-end tracing tests (docs/tracing.md): a
// module of its own, so the OpenTelemetry SDK and the OTLP protobuf types
// they use never enter the root module's dependencies.
//
// Through the real stack (PostgreSQL, the relay, Kafka, the inbox
// consumer), with the SDK's in-memory span recorder: a producer span
// writes events with outbox.Writer, the relay publishes them (with its
// optional publish span), the consumer applies them, and the test checks
// one trace id with the right parents and links. The outbox-relay binary's
// --trace-publish (the SDK's OTLP/HTTP exporter, configured by the binary's
// flags and the OTEL_* variables) is checked end to end by decoding what it
// sends to a local OTLP/HTTP receiver with the official OTLP protobuf types.
package tracing
