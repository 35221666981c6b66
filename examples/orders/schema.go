package main

// This file is the example's schema registry side (--record-format avro,
// issue 48): the order.confirmed schema registered through the
// registry's Confluent API, every event checked against it before its
// INSERT (outboxschema with outbox.WithEventCheck), and one order whose
// payload does not match refused before commit.

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

	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/outbox/outboxschema"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

// orderConfirmedAvro is the Avro schema of the order.confirmed payload,
// version 1 (orderConfirmed). confirmed_at is a timestamp-micros: the
// payload's RFC 3339 string is encoded as microseconds since the epoch,
// and a decoder gives back that number.
const orderConfirmedAvro = `{"type":"record","name":"OrderConfirmed","namespace":"examples.orders","fields":[` +
	`{"name":"order_id","type":"string"},` +
	`{"name":"customer_id","type":"string"},` +
	`{"name":"status","type":"string"},` +
	`{"name":"amount_cents","type":"long"},` +
	`{"name":"currency","type":"string"},` +
	`{"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[` +
	`{"name":"sku","type":"string"},{"name":"qty","type":"int"}]}}},` +
	`{"name":"confirmed_at","type":{"type":"long","logicalType":"timestamp-micros"}}]}`

// orderConfirmedVersion is the payload's schema_version: with the
// relay's default version source (--schema-version row) it is the
// subject's version the relay encodes the event with.
const orderConfirmedVersion = 1

// avroSetup registers the order.confirmed schema for the topic the relay
// publishes order events to, and returns the check that Writers use.
// The subject is the relay's default TopicNameStrategy, <topic>-value.
func avroSetup(ctx context.Context, cfg config, stdout io.Writer) (*outboxschema.Checker, error) {
	tmpl, err := publisher.ParseTopicTemplate(cfg.topicTemplate)
	if err != nil {
		return nil, fmt.Errorf("--topic-template: %w", err)
	}
	subject := tmpl.Render("order", "order.confirmed") + "-value"
	id, err := registerSchema(ctx, cfg.registryURL, subject, orderConfirmedAvro, orderConfirmedVersion)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stdout, "orders: registered the Avro schema of order.confirmed as subject %s version %d (schema id %d)\n",
		subject, orderConfirmedVersion, id)
	check, err := outboxschema.New(outboxschema.Config{
		Record:        record.Config{Format: record.FormatAvro, Registry: record.RegistryConfig{URL: cfg.registryURL}},
		TopicTemplate: cfg.topicTemplate,
	})
	if err != nil {
		return nil, fmt.Errorf("schema check: %w", err)
	}
	return check, nil
}

// registerSchema registers an Avro schema under subject (POST
// /subjects/{subject}/versions: a schema the subject already has keeps
// its id and version) and checks that it is the subject's version
// `version`, the one the events name in schema_version. It returns the
// schema id. A user:password in base is sent as basic auth, never in the
// URL or in an error.
func registerSchema(ctx context.Context, base, subject, schema string, version int) (int, error) {
	u, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || u.Host == "" {
		return 0, fmt.Errorf("schema registry URL: not an absolute URL")
	}
	user := u.User
	u.User = nil
	path := u.String() + "/subjects/" + url.PathEscape(subject) + "/versions"
	body, _ := json.Marshal(map[string]string{"schema": schema, "schemaType": record.SchemaTypeAvro})
	client := &http.Client{Timeout: 10 * time.Second}
	call := func(method, target string, body []byte, out any) (int, error) {
		req, err := http.NewRequestWithContext(ctx, method, target, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
		if user != nil {
			pw, _ := user.Password()
			req.SetBasicAuth(user.Username(), pw)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, out); err != nil {
				return resp.StatusCode, fmt.Errorf("%s %s: reading the answer: %w", method, target, err)
			}
			return resp.StatusCode, nil
		}
		return resp.StatusCode, fmt.Errorf("%s %s: HTTP %d: %s", method, target, resp.StatusCode, bytes.TrimSpace(b))
	}
	var reg struct{ ID int }
	if _, err := call(http.MethodPost, path, body, &reg); err != nil {
		return 0, fmt.Errorf("register the schema of %s: %w", subject, err)
	}
	var got struct{ ID, Version int }
	status, err := call(http.MethodGet, path+"/"+strconv.Itoa(version), nil, &got)
	switch {
	case status == http.StatusNotFound:
		return 0, fmt.Errorf("subject %s: the schema was registered as schema id %d, but the subject has no version %d "+
			"(it held other schemas before): its events name version %d; delete the subject or use another --topic-template",
			subject, reg.ID, version, version)
	case err != nil:
		return 0, fmt.Errorf("look up %s version %d: %w", subject, version, err)
	case got.ID != reg.ID:
		return 0, fmt.Errorf("subject %s: version %d is schema id %d, not this example's (schema id %d): "+
			"delete the subject or use another --topic-template", subject, version, got.ID, reg.ID)
	}
	return reg.ID, nil
}

// badOrder creates one order and confirms it with a payload that does
// not match the registered schema: amount_cents as a decimal string, the
// classic slip of a service that formats money for display. The schema
// check refuses the event inside the confirm transaction, before any SQL
// of it runs, so nothing commits: the order stays pending and the outbox
// gets no event. It prints the refusal, the *outboxschema.SchemaError's
// fields, and fails if the event got through.
func (s *shop) badOrder(ctx context.Context, stdout io.Writer) error {
	o, err := s.create(ctx)
	if err != nil {
		return err
	}
	_, err = s.confirmWith(ctx, o, func(p map[string]any) {
		p["amount_cents"] = fmt.Sprintf("%d.%02d", o.amountCents/100, o.amountCents%100)
	})
	var se *outboxschema.SchemaError
	switch {
	case err == nil:
		return fmt.Errorf("order %s: a payload with amount_cents as a string was committed: the schema check did not refuse it", o.id)
	case !errors.As(err, &se) || se.Unavailable:
		return fmt.Errorf("bad order %s: %w", o.id, err)
	}
	var status string
	var events int
	if err := s.pool.QueryRow(ctx, `SELECT status, (SELECT count(*) FROM `+s.outbox.Quoted()+` WHERE aggregate_id = $1)
		FROM `+s.orders.Quoted()+` WHERE id = $1`, o.id).Scan(&status, &events); err != nil {
		return fmt.Errorf("bad order %s: %w", o.id, err)
	}
	if status != "pending" || events != 0 {
		return fmt.Errorf("bad order %s: status %s and %d events after the refusal, want pending and none", o.id, status, events)
	}
	fmt.Fprintf(stdout, "orders: order %s refused before commit: %T, Field %q, errors.Is(err, outbox.ErrInvalidEvent) %t:\n  %v\n",
		o.id, se, se.Field, errors.Is(err, outbox.ErrInvalidEvent), se)
	fmt.Fprintf(stdout, "orders: order %s is still pending, and the outbox holds no event of it\n", o.id)
	return nil
}
