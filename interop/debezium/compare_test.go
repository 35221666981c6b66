package main

import (
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

func hdrs(kv ...string) []kafka.Header {
	var out []kafka.Header
	for i := 0; i < len(kv); i += 2 {
		var v []byte
		if kv[i+1] != "\x00null" {
			v = []byte(kv[i+1])
		}
		out = append(out, kafka.Header{Key: kv[i], Value: v})
	}
	return out
}

// rowsOf is the outbox rows of the comparison: event id, then the
// headers column's JSON text ("" for NULL).
func rowsOf(t *testing.T, kv ...string) map[string]rowInfo {
	m := map[string]rowInfo{}
	for i := 0; i < len(kv); i += 2 {
		var info rowInfo
		if kv[i+1] != "" {
			var err error
			if info.headers, err = jsonMembers([]byte(kv[i+1])); err != nil {
				t.Fatal(err)
			}
		}
		m[kv[i]] = info
	}
	return m
}

// Event ids of the tests (record.Decode wants UUIDs).
const (
	e1 = "00000000-0000-4000-8000-000000000001"
	e2 = "00000000-0000-4000-8000-000000000002"
	e3 = "00000000-0000-4000-8000-000000000003"
	e4 = "00000000-0000-4000-8000-000000000004"
)

var (
	commit = time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	dSide  = side{"debezium", ".r-dbz"}
	rSide  = side{"relay", ".r-relay"}
)

// pair is a router record and the relay record that matches it.
func pair(id, rowHeaders string, relayRowHeaders ...string) (rawRecord, rawRecord) {
	d := rawRecord{
		Topic: "outbox.event.order.r-dbz", Partition: 3, Offset: 0, Key: []byte("order-1"), Value: []byte(`{"a": 1}`),
		Headers: append(hdrs(
			"__debezium.context.connectorLogicalName", "x", "__debezium.context.taskId", "0",
			"id", id, "event_type", "order.created", "aggregate_type", "order", "aggregate_version", "1", "schema_version", "2"),
			hdrs("headers", rowHeaders)...),
		Time: commit.Add(40 * time.Millisecond),
	}
	r := rawRecord{
		Topic: "outbox.event.order.r-relay", Partition: 3, Offset: 0, Key: []byte("order-1"), Value: []byte(`{"a": 1}`),
		Headers: append(hdrs("id", id, "event_type", "order.created", "aggregate_type", "order", "aggregate_version", "1", "schema_version", "2"),
			hdrs(relayRowHeaders...)...),
		Time: commit,
	}
	return d, r
}

func TestCompareExplainedOnly(t *testing.T) {
	d1, r1 := pair(e1, `{"k": "v", "quote": "a\"b"}`, "k", "v", "quote", `a"b`)
	d2, r2 := pair(e2, "\x00null")
	d2.Offset, r2.Offset = 1, 1
	c := compareRecords("p", []rawRecord{d1, d2}, []rawRecord{r1, r2}, dbzSpec(dSide), relaySpec(rSide), "headers",
		rowsOf(t, e1, `{"k": "v", "quote": "a\"b"}`, e2, ""))
	if !c.ok() {
		t.Fatalf("unexplained: %v", c.Unexplained)
	}
	if c.Matched != 2 {
		t.Fatalf("matched %d", c.Matched)
	}
	want := map[string]int{kindContext: 2, kindRowHeader: 2, kindTime: 2}
	for k, n := range want {
		if e := c.Explained[k]; e == nil || e.Count != n {
			t.Errorf("%s: %+v, want %d", k, e, n)
		}
	}
}

func TestCompareFindsDifferences(t *testing.T) {
	tests := []struct {
		name string
		edit func(d, r *rawRecord)
		what string
	}{
		{"value", func(d, r *rawRecord) { r.Value = []byte(`{"a":1}`) }, "value"},
		{"null value", func(d, r *rawRecord) { r.Value = nil }, "value"},
		{"key", func(d, r *rawRecord) { r.Key = []byte("order-2") }, "key"},
		{"partition", func(d, r *rawRecord) { r.Partition = 4 }, "partition"},
		{"topic", func(d, r *rawRecord) { r.Topic = "outbox.event.orders.r-relay" }, "topic"},
		{"header value", func(d, r *rawRecord) { r.Headers[3].Value = []byte("2") }, "headers"},
		{"header order", func(d, r *rawRecord) { r.Headers[1], r.Headers[2] = r.Headers[2], r.Headers[1] }, "headers"},
		{"row header missing", func(d, r *rawRecord) { r.Headers = r.Headers[:5] }, "headers"},
		{"time before commit", func(d, r *rawRecord) { d.Time = commit.Add(-time.Millisecond) }, "record timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, r := pair(e1, `{"k": "v"}`, "k", "v")
			tt.edit(&d, &r)
			c := compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "headers", rowsOf(t, e1, `{"k": "v"}`))
			// The inbox may see the same difference in the decoded event.
			if len(c.Unexplained) == 0 || !strings.HasPrefix(c.Unexplained[0].What, tt.what) {
				t.Fatalf("unexplained %v, want %q first", c.Unexplained, tt.what)
			}
			for _, u := range c.Unexplained[1:] {
				if !strings.HasPrefix(u.What, "record.Decode") {
					t.Fatalf("unexplained %v, want one %q", c.Unexplained, tt.what)
				}
			}
		})
	}
}

func TestCompareMissingDuplicateAndOrder(t *testing.T) {
	d1, r1 := pair(e1, "{}")
	d2, r2 := pair(e2, "{}")
	d2.Offset, r2.Offset = 1, 1
	// The relay has e2 before e1 in the same partition and key.
	r1.Offset, r2.Offset = 1, 0
	c := compareRecords("p", []rawRecord{d1, d2}, []rawRecord{r2, r1}, dbzSpec(dSide), relaySpec(rSide), "headers", rowsOf(t, e1, "{}", e2, "{}"))
	if len(c.Unexplained) != 1 || c.Unexplained[0].What != "order of one key's events" {
		t.Fatalf("unexplained %v, want the order", c.Unexplained)
	}

	d3, _ := pair(e3, "{}")
	c = compareRecords("p", []rawRecord{d1, d3, d3}, []rawRecord{r1}, dbzSpec(dSide), relaySpec(rSide), "headers", rowsOf(t, e1, "{}", e3, "{}", e4, "{}"))
	var whats []string
	for _, u := range c.Unexplained {
		whats = append(whats, u.What+" "+u.EventID)
	}
	got := strings.Join(whats, "; ")
	for _, w := range []string{"duplicate record on the router side " + e3, "outbox row missing " + e3, "outbox row missing " + e4} {
		if !strings.Contains(got, w) {
			t.Errorf("missing %q in %s", w, got)
		}
	}
}

// The configuration of docs/formats.md: no context headers, the headers
// column not placed.
func TestCompareWithoutRowHeadersPlacement(t *testing.T) {
	strip := func(d *rawRecord) {
		d.Headers = d.Headers[2 : len(d.Headers)-1]
	}
	d, r := pair(e1, "{}")
	strip(&d)
	c := compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "", rowsOf(t, e1, ""))
	if !c.ok() || c.Explained[kindRowHeader] != nil || c.Explained[kindRowHeaderNotPl] != nil || c.Explained[kindContext] != nil {
		t.Fatalf("unexplained %v explained %v", c.Unexplained, c.Explained)
	}

	d, r = pair(e1, "", "tracestate", "v", "traceparent", "00-1")
	strip(&d)
	c = compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "", rowsOf(t, e1, `{"tracestate": "v", "traceparent": "00-1"}`))
	if !c.ok() || c.Explained[kindRowHeaderNotPl] == nil {
		t.Fatalf("unexplained %v explained %v", c.Unexplained, c.Explained)
	}

	// The relay must carry the row's headers, in the column's order.
	r.Headers[5], r.Headers[6] = r.Headers[6], r.Headers[5]
	c = compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "", rowsOf(t, e1, `{"tracestate": "v", "traceparent": "00-1"}`))
	if len(c.Unexplained) != 1 || !strings.HasPrefix(c.Unexplained[0].What, "headers") {
		t.Fatalf("unexplained %v", c.Unexplained)
	}
}

func TestCompareTombstones(t *testing.T) {
	d, r := pair(e1, "\x00null")
	d.Value, r.Value = nil, nil
	c := compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "headers", rowsOf(t, e1, ""))
	if !c.ok() || c.Tombstones != 1 {
		t.Fatalf("unexplained %v tombstones %d", c.Unexplained, c.Tombstones)
	}
	r.Value = []byte{}
	c = compareRecords("p", []rawRecord{d}, []rawRecord{r}, dbzSpec(dSide), relaySpec(rSide), "headers", rowsOf(t, e1, ""))
	if len(c.Unexplained) == 0 || c.Unexplained[0].What != "value" {
		t.Fatalf("an empty value passed for a null one: %v", c.Unexplained)
	}
}

func TestJSONMembers(t *testing.T) {
	got, err := jsonMembers([]byte(`{"b": "1", "a": "é\"", "b2": ""}`))
	if err != nil || headerList(got) != `[b="1" a="é\"" b2=""]` {
		t.Fatalf("%s %v", headerList(got), err)
	}
	if got, err := jsonMembers(nil); err != nil || got != nil {
		t.Fatalf("nil: %v %v", got, err)
	}
	for _, bad := range []string{`[]`, `{"a": 1}`, `{"a": "x"`} {
		if _, err := jsonMembers([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}
