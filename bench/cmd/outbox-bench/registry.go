package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/schemareg"
	"github.com/outbox-relay/outbox-relay/record"
)

// benchSchemas are the schemas of payloadSQL's object, one per registry
// format: the bench registers it as version 1 of the subject its relay
// looks up (TopicNameStrategy, <topic>-value; the rows' schema_version is
// 1). Every field is required, as the payload always has them all.
var benchSchemas = map[string]struct{ schemaType, text string }{
	formatAvro: {record.SchemaTypeAvro, `{"type":"record","name":"Created","namespace":"bench","fields":[` +
		`{"name":"order_id","type":"long"},{"name":"customer_id","type":"string"},{"name":"amount_cents","type":"int"},` +
		`{"name":"currency","type":"string"},{"name":"status","type":"string"},{"name":"note","type":"string"}]}`},
	formatProtobuf: {record.SchemaTypeProtobuf, `syntax = "proto3";
package bench;

message Created {
  int64 order_id = 1;
  string customer_id = 2;
  int32 amount_cents = 3;
  string currency = 4;
  string status = 5;
  string note = 6;
}
`},
	formatJSONSchema: {record.SchemaTypeJSON, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",` +
		`"properties":{"order_id":{"type":"integer"},"customer_id":{"type":"string"},"amount_cents":{"type":"integer"},` +
		`"currency":{"type":"string"},"status":{"type":"string"},"note":{"type":"string"}},` +
		`"required":["order_id","customer_id","amount_cents","currency","status","note"],"additionalProperties":false}`},
}

// registry is the few calls of the Confluent API the bench makes itself:
// register a schema, list and delete subjects. The relay's lookups go
// through its own client.
type registry struct {
	base string
	http *http.Client
}

func newRegistry(base string) *registry {
	return &registry{base: strings.TrimSuffix(base, "/"), http: &http.Client{Timeout: 30 * time.Second}}
}

// redacted is the registry's URL without credentials, for messages.
func (r *registry) redacted() string {
	u, err := url.Parse(r.base)
	if err != nil {
		return "the registry"
	}
	return u.Redacted()
}

func (r *registry) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	}
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s at %s: %w", method, path, r.redacted(), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s at %s: HTTP %d: %s", method, path, r.redacted(), resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: %w: %s", method, path, err, data)
		}
	}
	return nil
}

// register adds schema (of schemaType) to subject and checks it is
// version 1, the version the bench's rows name; it returns the schema id.
func (r *registry) register(ctx context.Context, subject, schemaType, schema string) (int, error) {
	p := "/subjects/" + url.PathEscape(subject) + "/versions"
	var reg struct{ ID int }
	if err := r.do(ctx, http.MethodPost, p, map[string]string{"schema": schema, "schemaType": schemaType}, &reg); err != nil {
		return 0, err
	}
	var v struct{ ID, Version int }
	if err := r.do(ctx, http.MethodGet, p+"/1", nil, &v); err != nil {
		return 0, err
	}
	if v.ID != reg.ID {
		return 0, fmt.Errorf("subject %s: version 1 is schema %d, not the %d just registered (a leftover subject?)", subject, v.ID, reg.ID)
	}
	return reg.ID, nil
}

// subjects lists the registry's subjects.
func (r *registry) subjects(ctx context.Context) ([]string, error) {
	var s []string
	err := r.do(ctx, http.MethodGet, "/subjects", nil, &s)
	return s, err
}

// deleteSubject deletes subject for good: a soft delete, then the
// permanent one, as the Confluent API wants.
func (r *registry) deleteSubject(ctx context.Context, subject string) error {
	p := "/subjects/" + url.PathEscape(subject)
	if err := r.do(ctx, http.MethodDelete, p, nil, nil); err != nil {
		return err
	}
	return r.do(ctx, http.MethodDelete, p+"?permanent=true", nil, nil)
}

// topicFor is the topic the relay of format writes: the run's topic for
// native, one of its own for each registry format, so each has its own
// subject (<topic>-value) and the consumer of a latency run reads only
// its relay's records.
func (b *bench) topicFor(format string) string {
	if format == "" || format == formatNative {
		return b.topic
	}
	return b.topic + "_" + strings.ReplaceAll(format, "-", "_")
}

// setupFormats creates each registry format's topic and registers its
// schema, before any relay starts.
func (b *bench) setupFormats(ctx context.Context) error {
	for _, f := range b.cfg.registryFormats() {
		topic := b.topicFor(f)
		if err := b.createTopic(ctx, topic); err != nil {
			return err
		}
		subject := topic + "-value"
		b.mu.Lock()
		b.subjects = append(b.subjects, subject)
		b.mu.Unlock()
		s := benchSchemas[f]
		id, err := b.registry.register(ctx, subject, s.schemaType, s.text)
		if err != nil {
			return fmt.Errorf("register the %s schema: %w", f, err)
		}
		b.logf("%s: registered schema %d as version 1 of %s", f, id, subject)
	}
	return nil
}

// deleteSubjects removes the registry subjects of the run (cleanup).
func (b *bench) deleteSubjects(ctx context.Context, subjects []string) {
	for _, s := range subjects {
		if err := b.registry.deleteSubject(ctx, s); err != nil {
			b.logf("cleanup: delete subject %s: %v", s, err)
		}
	}
}

// dropStaleSubjects deletes the subjects of earlier runs (by their run id).
func (b *bench) dropStaleSubjects(ctx context.Context, stale func(string) bool) {
	if b.registry == nil {
		return
	}
	all, err := b.registry.subjects(ctx)
	if err != nil {
		b.logf("list registry subjects: %v", err)
		return
	}
	for _, s := range all {
		if stale(s) && b.registry.deleteSubject(ctx, s) == nil {
			b.logf("deleted subject %s of an earlier run", s)
		}
	}
}

// decodeResult is the check that a registry format's records read back:
// the first records a latency run's consumer received, decoded with the
// schema their frame names (fetched from the registry by id, parsed and
// decoded by package record, as the inbox does), every field equal to the
// payload the writer built for the row.
type decodeResult struct {
	variant
	Round   int    `json:"round,omitempty"`
	Checked int    `json:"checked"`
	Error   string `json:"error,omitempty"`
}

// checkDecodable decodes msgs, records of format, and compares each with
// payloadSQL's object for the row (its aggregate_version is the row
// number j).
func (b *bench) checkDecodable(ctx context.Context, format string, msgs []kafka.Message) error {
	if len(msgs) == 0 {
		return errors.New("no record received to decode")
	}
	c, err := schemareg.New(schemareg.Config{URL: b.cfg.RegistryURL})
	if err != nil {
		return err
	}
	for _, m := range msgs {
		ev, err := record.DecodeFormat(m, record.Format(format))
		if err != nil {
			return err
		}
		s, err := c.Parsed(ctx, ev.SchemaID)
		if err != nil {
			return fmt.Errorf("offset %d: schema %d: %w", m.Offset, ev.SchemaID, err)
		}
		js, err := s.DecodeValue(m.Value)
		if err != nil {
			return fmt.Errorf("offset %d: decode with schema %d: %w", m.Offset, ev.SchemaID, err)
		}
		if err := checkPayload(js, ev.AggregateVersion); err != nil {
			return fmt.Errorf("offset %d (schema %d): %w", m.Offset, ev.SchemaID, err)
		}
	}
	return nil
}

// checkPayload compares a decoded value with payloadSQL's object for row
// j. Numbers compare by their text, so a Protobuf int64 decoded as a
// string (protojson) equals the number.
func checkPayload(js []byte, j int64) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var got map[string]any
	if err := dec.Decode(&got); err != nil {
		return fmt.Errorf("decoded value %q: %w", js, err)
	}
	want := map[string]string{
		"order_id": strconv.FormatInt(j, 10), "customer_id": "cust-" + strconv.FormatInt(j%5000, 10),
		"amount_cents": strconv.FormatInt(j*7919%100000, 10), "currency": "EUR", "status": "confirmed", "note": strings.Repeat("x", 175),
	}
	if len(got) != len(want) {
		return fmt.Errorf("decoded value has %d fields, want %d: %s", len(got), len(want), js)
	}
	for k, w := range want {
		if v, ok := got[k]; !ok || fmt.Sprint(v) != w {
			return fmt.Errorf("field %s = %v, want %s", k, v, w)
		}
	}
	return nil
}
