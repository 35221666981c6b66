package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/record"
)

// debeziumContextPrefix starts the names of the headers Debezium adds to
// every record while extended.headers.enabled is on (the default): the
// connector's logical name, task id, connector name and run id.
const debeziumContextPrefix = "__debezium.context."

// The explained differences, by kind. docs/debezium-interop.md must name
// each (the run checks it).
const (
	kindContext        = "Debezium context headers"
	kindRowHeader      = "row headers: one JSON header vs one header per member"
	kindRowHeaderNotPl = "row headers: not placed by the router"
	kindTime           = "record timestamp"
)

// why says why each explained kind differs (docs/debezium-interop.md
// says it at length).
var why = map[string]string{
	kindContext: "Debezium adds __debezium.context.* headers (connectorLogicalName, taskId, connectorName, runId) " +
		"to every record while extended.headers.enabled is on, its default: metadata about the Connect task, " +
		"no part of the event; the relay has no such task",
	kindRowHeader: "the router can place the outbox row's headers column only as one header holding the column's " +
		"JSON text (null for a NULL column); the relay writes each member as a header of its own, as the inbox " +
		"and the W3C trace context need. Checked member by member: same names, values and order",
	kindRowHeaderNotPl: "the router can place the outbox row's headers column only as one header holding its JSON " +
		"text, and the configuration in docs/formats.md does not place it, so the router's records do not carry " +
		"the row's headers; the relay writes each member as a header of its own after the mapped ones (the W3C " +
		"trace context among them). Checked: the relay's extra headers are exactly the members of the row's " +
		"headers column, in order",
	kindTime: "the router's record time is ts_ms, when the connector processed the change; the relay's is the " +
		"transaction's commit time (the router's table.field.event.timestamp takes only an epoch number column, " +
		"not the table's timestamptz). Checked: the router's time is never before the commit time",
}

// sideSpec says how to read one side's records.
type sideSpec struct {
	name   string
	suffix string // the topics' suffix; the rest is the routed topic name
	idKeys []string
}

// comparison is the outcome of comparing the router's records with the
// relay's, record for record by event id.
type comparison struct {
	Profile    string
	Debezium   int // records read
	Relay      int
	Rows       int // event ids in the outbox table
	Matched    int // records present on both sides, compared field by field
	Tombstones int // of those, records with a null value on both sides
	// InboxDecoded counts the matched pairs the inbox package decoded,
	// both sides as FormatDebezium, into equal events.
	InboxDecoded int
	Unexplained  []difference
	Explained    map[string]*explainedDiff
	TimeDelta    []time.Duration // router time - relay time, per matched record
}

// difference is one field of one event that differs without an
// explanation.
type difference struct {
	EventID  string
	What     string
	Debezium string
	Relay    string
}

func (d difference) String() string {
	return fmt.Sprintf("event %s: %s: router %s, relay %s", d.EventID, d.What, d.Debezium, d.Relay)
}

// explainedDiff counts an explained kind of difference, with one example.
type explainedDiff struct {
	Kind    string
	Count   int
	Example string
}

// ok says the comparison found no unexplained difference.
func (c *comparison) ok() bool { return len(c.Unexplained) == 0 && c.Matched > 0 }

func (c *comparison) explain(kind, example string) {
	if c.Explained == nil {
		c.Explained = map[string]*explainedDiff{}
	}
	e := c.Explained[kind]
	if e == nil {
		e = &explainedDiff{Kind: kind, Example: example}
		c.Explained[kind] = e
	}
	e.Count++
}

// explainedKinds lists the explained kinds in a fixed order.
func (c *comparison) explainedKinds() []*explainedDiff {
	var out []*explainedDiff
	for _, k := range []string{kindContext, kindRowHeader, kindRowHeaderNotPl, kindTime} {
		if e := c.Explained[k]; e != nil {
			out = append(out, e)
		}
	}
	return out
}

// eventID is the record's event id: the first of keys present.
func eventID(r *rawRecord, keys []string) string {
	for _, k := range keys {
		for _, h := range r.Headers {
			if h.Key == k {
				return string(h.Value)
			}
		}
	}
	return ""
}

// rowInfo is what the comparison knows of an outbox row: the members of
// its headers column (none for NULL).
type rowInfo struct {
	headers []kafka.Header
}

// compareRecords compares the router's records (dbz) with the relay's
// (rel). rowHeaders names the router's header that holds the outbox row's
// headers column ("" when the router does not place it). rows, when not
// nil, are the outbox table's rows by event id: each must be on both
// sides once.
func compareRecords(profile string, dbz, rel []rawRecord, ds, rs sideSpec, rowHeaders string, rows map[string]rowInfo) *comparison {
	c := &comparison{Profile: profile, Debezium: len(dbz), Relay: len(rel), Rows: len(rows)}
	index := func(recs []rawRecord, s sideSpec) map[string]*rawRecord {
		m := make(map[string]*rawRecord, len(recs))
		for i := range recs {
			r := &recs[i]
			id := eventID(r, s.idKeys)
			if id == "" {
				c.Unexplained = append(c.Unexplained, difference{EventID: "?", What: s.name + " record without an event id header",
					Debezium: "", Relay: fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)})
				continue
			}
			if _, dup := m[id]; dup {
				c.Unexplained = append(c.Unexplained, difference{EventID: id, What: "duplicate record on the " + s.name + " side"})
				continue
			}
			m[id] = r
		}
		return m
	}
	dm, rm := index(dbz, ds), index(rel, rs)
	rowIDs := make([]string, 0, len(rows))
	for id := range rows {
		rowIDs = append(rowIDs, id)
	}
	sort.Strings(rowIDs)
	for _, id := range rowIDs {
		if dm[id] == nil {
			c.Unexplained = append(c.Unexplained, difference{EventID: id, What: "outbox row missing", Debezium: "no record", Relay: presence(rm[id])})
		} else if rm[id] == nil {
			c.Unexplained = append(c.Unexplained, difference{EventID: id, What: "outbox row missing", Debezium: "present", Relay: "no record"})
		}
	}
	ids := make([]string, 0, len(dm))
	for id := range dm {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		d, r := dm[id], rm[id]
		if r == nil {
			if rows == nil {
				c.Unexplained = append(c.Unexplained, difference{EventID: id, What: "record", Debezium: "present", Relay: "no record"})
			}
			continue
		}
		c.Matched++
		if d.Value == nil && r.Value == nil {
			c.Tombstones++
		}
		row, known := rows[id]
		c.compareOne(id, d, r, ds, rs, rowHeaders, row, known)
	}
	if rows == nil {
		for id := range rm {
			if dm[id] == nil {
				c.Unexplained = append(c.Unexplained, difference{EventID: id, What: "record", Debezium: "no record", Relay: "present"})
			}
		}
	}
	c.compareKeyOrder(dbz, rel, ds, rs)
	return c
}

func presence(r *rawRecord) string {
	if r == nil {
		return "no record"
	}
	return "present"
}

func (c *comparison) diff(id, what string, d, r any) {
	c.Unexplained = append(c.Unexplained, difference{EventID: id, What: what, Debezium: show(d), Relay: show(r)})
}

// show renders a compared value for a message, bytes quoted and cut at
// 200 characters.
func show(v any) string {
	var s string
	switch x := v.(type) {
	case []byte:
		if x == nil {
			return "null"
		}
		s = strconv.Quote(string(x))
	case string:
		s = strconv.Quote(x)
	default:
		s = fmt.Sprint(x)
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (c *comparison) compareOne(id string, d, r *rawRecord, ds, rs sideSpec, rowHeaders string, row rowInfo, known bool) {
	dt, dok := strings.CutSuffix(d.Topic, ds.suffix)
	rt, rok := strings.CutSuffix(r.Topic, rs.suffix)
	if !dok || !rok || dt != rt {
		c.diff(id, "topic (suffixes "+ds.suffix+", "+rs.suffix+" removed)", d.Topic, r.Topic)
	}
	if d.Partition != r.Partition {
		c.diff(id, "partition", d.Partition, r.Partition)
	}
	if !bytes.Equal(d.Key, r.Key) || (d.Key == nil) != (r.Key == nil) {
		c.diff(id, "key", d.Key, r.Key)
	}
	if !bytes.Equal(d.Value, r.Value) || (d.Value == nil) != (r.Value == nil) {
		c.diff(id, "value", d.Value, r.Value)
	}
	c.compareHeaders(id, d.Headers, r.Headers, rowHeaders, row, known)
	c.compareInbox(id, d, r)
	// Kafka keeps milliseconds: the relay's commit time is cut to them.
	delta := d.Time.Sub(r.Time)
	c.TimeDelta = append(c.TimeDelta, delta)
	if !d.Time.Equal(r.Time) {
		if delta < 0 {
			c.diff(id, "record timestamp: the router's is before the commit time", d.Time.UTC().Format(time.RFC3339Nano), r.Time.UTC().Format(time.RFC3339Nano))
		} else {
			c.explain(kindTime, fmt.Sprintf("router %s, relay (commit) %s", d.Time.UTC().Format("15:04:05.000"), r.Time.UTC().Format("15:04:05.000")))
		}
	}
}

// compareHeaders: the relay's headers must be the router's, without its
// context headers and its header holding the row's headers column (when
// it places it), followed by the members of the row's headers column:
// names, values and order. A placed headers column must hold exactly
// those members. Without the row (known false) the members are taken
// from the placed header.
func (c *comparison) compareHeaders(id string, dh, rh []kafka.Header, rowHeaders string, row rowInfo, known bool) {
	var want []kafka.Header
	var ctx []string
	placed := false
	var placedMembers []kafka.Header
	for _, h := range dh {
		switch {
		case strings.HasPrefix(h.Key, debeziumContextPrefix):
			ctx = append(ctx, h.Key)
		case rowHeaders != "" && h.Key == rowHeaders:
			members, err := jsonMembers(h.Value)
			if err != nil {
				c.diff(id, "router header "+rowHeaders+" is not a JSON object of strings: "+err.Error(), h.Value, "")
				return
			}
			placed, placedMembers = true, members
		default:
			want = append(want, h)
		}
	}
	members := row.headers
	if !known {
		members = placedMembers
	}
	if placed && !headersEqual(placedMembers, members) {
		c.diff(id, "router header "+rowHeaders+" does not hold the row's headers", headerList(placedMembers), headerList(members))
		return
	}
	want = append(want, members...)
	if !headersEqual(want, rh) {
		c.diff(id, "headers (the router's, context headers removed, then the row's headers)", headerList(want), headerList(rh))
		return
	}
	if len(ctx) > 0 {
		c.explain(kindContext, strings.Join(ctx, ", "))
	}
	switch {
	case placed:
		c.explain(kindRowHeader, headerList(rh))
	case len(members) > 0:
		c.explain(kindRowHeaderNotPl, headerList(rh))
	}
}

// compareInbox decodes both records with record.Decode (the format
// detected from the headers): both must be FormatDebezium and decode into
// the same event (the row's headers aside: the router does not carry
// them, see compareHeaders).
func (c *comparison) compareInbox(id string, d, r *rawRecord) {
	de, derr := record.Decode(d.message())
	re, rerr := record.Decode(r.message())
	switch {
	case derr != nil || rerr != nil:
		c.diff(id, "record.Decode fails", fmt.Sprint(derr), fmt.Sprint(rerr))
	case de.Format != record.FormatDebezium || re.Format != record.FormatDebezium:
		c.diff(id, "record.Decode detects another format than debezium", de.Format, re.Format)
	case de.ID != id || re.ID != id || de.AggregateType != re.AggregateType || de.AggregateID != re.AggregateID ||
		de.AggregateVersion != re.AggregateVersion || de.EventType != re.EventType || de.SchemaVersion != re.SchemaVersion ||
		!bytes.Equal(de.Payload, re.Payload) || (de.Payload == nil) != (re.Payload == nil):
		c.diff(id, "record.Decode events differ", inboxEvent(de), inboxEvent(re))
	default:
		c.InboxDecoded++
	}
}

func inboxEvent(e record.Event) string {
	return fmt.Sprintf("{id %s %s/%s v%d %s schema %d payload %s}", e.ID, e.AggregateType, e.AggregateID,
		e.AggregateVersion, e.EventType, e.SchemaVersion, show(e.Payload))
}

func headersEqual(a, b []kafka.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) || (a[i].Value == nil) != (b[i].Value == nil) {
			return false
		}
	}
	return true
}

// headerList renders headers as name=value pairs.
func headerList(hs []kafka.Header) string {
	parts := make([]string, len(hs))
	for i, h := range hs {
		if h.Value == nil {
			parts[i] = h.Key + "=null"
		} else {
			parts[i] = h.Key + "=" + strconv.Quote(string(h.Value))
		}
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// jsonMembers are the members of a JSON object of strings, in order; null
// (a NULL column) has none.
func jsonMembers(raw []byte) ([]kafka.Header, error) {
	if raw == nil || string(bytes.TrimSpace(raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, fmt.Errorf("not a JSON object")
	}
	var out []kafka.Header
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("member %q is not a string", name)
		}
		out = append(out, kafka.Header{Key: name, Value: append([]byte{}, s...)})
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') {
		return nil, fmt.Errorf("unterminated JSON object")
	}
	return out, nil
}

// compareKeyOrder checks that both sides hold each key's events in the
// same order (per routed topic and key, by offset; the events of one key
// share a partition).
func (c *comparison) compareKeyOrder(dbz, rel []rawRecord, ds, rs sideSpec) {
	seq := func(recs []rawRecord, s sideSpec) map[string][]string {
		sorted := append([]rawRecord(nil), recs...)
		sort.SliceStable(sorted, func(i, j int) bool {
			if sorted[i].Topic != sorted[j].Topic {
				return sorted[i].Topic < sorted[j].Topic
			}
			if sorted[i].Partition != sorted[j].Partition {
				return sorted[i].Partition < sorted[j].Partition
			}
			return sorted[i].Offset < sorted[j].Offset
		})
		m := map[string][]string{}
		for i := range sorted {
			r := &sorted[i]
			t, _ := strings.CutSuffix(r.Topic, s.suffix)
			k := t + "\x00" + string(r.Key)
			m[k] = append(m[k], eventID(r, s.idKeys))
		}
		return m
	}
	dseq, rseq := seq(dbz, ds), seq(rel, rs)
	keys := make([]string, 0, len(dseq))
	for k := range dseq {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		a, b := dseq[k], rseq[k]
		if len(a) != len(b) {
			continue // a missing record is reported already
		}
		for i := range a {
			if a[i] != b[i] {
				t, key, _ := strings.Cut(k, "\x00")
				c.Unexplained = append(c.Unexplained, difference{EventID: a[i], What: "order of one key's events",
					Debezium: fmt.Sprintf("%s key %q event #%d is %s", t, key, i+1, a[i]), Relay: b[i]})
				break
			}
		}
	}
}
