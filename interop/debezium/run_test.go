package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestTemplateFromDoc(t *testing.T) {
	doc := "# Formats\n\n```properties\nkey.converter=x\n```\n\nThe router:\n\n```properties\n" +
		"# comment\nextended.headers.enabled=false\ntransforms=ob\ntransforms.ob.type=io.debezium.transforms.outbox.EventRouter\n" +
		"transforms.ob.table.field.event.id=event_id\ntransforms.ob.table.field.event.key = aggregate_id\n" +
		"transforms.ob.route.by.field=aggregate_type\ntransforms.other.x=y\n```\n\nExpansion:\n\n```properties\n" +
		"transforms.ob.table.expand.json.payload=true\nvalue.converter=j\n```\n"
	tm, ok := templateFromDoc(doc)
	if !ok {
		t.Fatal("no connector block found")
	}
	want := props{{"table.field.event.id", "event_id"}, {"table.field.event.key", "aggregate_id"}, {"route.by.field", "aggregate_type"}}
	if tm.router().String() != want.String() || tm.transform != "ob" || len(tm.base) != 7 {
		t.Fatalf("got\n%s\nwant\n%s (%+v)", tm.router(), want, tm)
	}
	if v, _ := tm.expand.get("value.converter"); v != "j" {
		t.Fatalf("expansion overrides %v", tm.expand)
	}
	if _, ok := templateFromDoc("no blocks"); ok {
		t.Fatal("found a block in a doc without one")
	}
	if err := checkRouter(tm.router()); err != nil {
		t.Fatal(err)
	}
	if err := checkRouter(tm.router().withOption("route.by.field", "aggregatetype")); err == nil {
		t.Fatal("route.by.field aggregatetype accepted")
	}
}

// TestFormatsDocTemplate: docs/formats.md holds the connector
// configuration make interop runs, with the expansion settings.
func TestFormatsDocTemplate(t *testing.T) {
	tm := formatsDocTemplate(t)
	if err := checkRouter(tm.router()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"connector.class", "key.converter", "value.converter", "transforms.outbox.table.fields.additional.placement"} {
		if _, ok := tm.base.get(k); !ok {
			t.Errorf("docs/formats.md's connector configuration has no %s", k)
		}
	}
	if v, _ := tm.expand.get("transforms.outbox.table.expand.json.payload"); v != "true" {
		t.Errorf("docs/formats.md has no expansion settings: %v", tm.expand)
	}
}

func formatsDocTemplate(t *testing.T) connectorTemplate {
	t.Helper()
	doc, err := os.ReadFile("../../docs/formats.md")
	if err != nil {
		t.Fatal(err)
	}
	tm, ok := templateFromDoc(string(doc))
	if !ok {
		t.Fatal("docs/formats.md has no EventRouter configuration block")
	}
	return tm
}

func TestRowHeadersAlias(t *testing.T) {
	for placement, want := range map[string]string{
		"event_type:header,headers:header":        "headers",
		"headers:header:row_headers,x:envelope":   "row_headers",
		"event_type:header,headers:envelope:hdrs": "",
		"": "",
		"event_type:header, headers:header:h,a:b:c": "h",
	} {
		if got := rowHeadersAlias(props{{"table.fields.additional.placement", placement}}); got != want {
			t.Errorf("%q: %q, want %q", placement, got, want)
		}
	}
}

func TestConnectorProperties(t *testing.T) {
	db, err := pgx.ParseConfig("postgres://postgres:pw@127.0.0.1:55432/outbox?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	r := &run{id: "i1", tmpl: formatsDocTemplate(t)}
	c := r.connectorFor(side{"debezium-expand", ".i1-dbz-x"}, "s.t", "slot", "pub", true, true)
	p := c.properties(db)
	for k, v := range map[string]string{
		"database.port": "55432", "database.password": "pw", "slot.name": "slot", "publication.name": "pub",
		"publication.autocreate.mode": "disabled", "snapshot.mode": "no_data", "table.include.list": "s.t",
		"topic.prefix": "i1_debezium_expand", "key.converter": stringConverter, "value.converter": jsonConverter,
		"value.converter.schemas.enable":                     "false",
		"transforms.outbox.type":                             eventRouter,
		"transforms.outbox.route.topic.replacement":          "outbox.event.${routedByValue}.i1-dbz-x",
		"transforms.outbox.table.expand.json.payload":        "true",
		"transforms.outbox.route.tombstone.on.empty.payload": "true",
		"extended.headers.enabled":                           "false",
	} {
		if got, _ := p.get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	plain := r.connectorFor(side{"debezium", ".i1-dbz"}, "s.t", "slot", "pub", false, false).properties(db)
	if v, _ := plain.get("value.converter"); v != "io.debezium.converters.BinaryDataConverter" {
		t.Errorf("plain value.converter %q", v)
	}
	if v, _ := plain.get("transforms.outbox.route.tombstone.on.empty.payload"); v != "false" {
		t.Errorf("plain tombstones %q", v)
	}
	if got := r.relayTemplate(side{"relay", ".i1-relay"}); got != "outbox.event.{aggregate_type}.i1-relay" {
		t.Errorf("relay template %q", got)
	}
	if got := r.topicsOf(side{"relay", ".x"}); strings.Join(got, ",") != "outbox.event.order.x,outbox.event.customer.x,outbox.event.payment.x" {
		t.Errorf("topics %v", got)
	}
	if s := (props{{"a", `x\y`}, {"b", " lead"}}).String(); s != "a=x\\\\y\nb=\\ lead\n" {
		t.Errorf("escaping: %q", s)
	}
}

func TestParseRelayHelp(t *testing.T) {
	f := parseRelayHelp("Flags:\n  -backoff-base duration\n  -record-format string\n    \tnative...\n  -debezium-expand-json-payload\n    \texpand\n"+
		"  -tombstone-on-null-payload\n", "Flags:\n  -nullable-payload\n")
	if !f.recordFormat || f.expandFlag != "--debezium-expand-json-payload" || !f.tombstones {
		t.Fatalf("%+v", f)
	}
	if f := parseRelayHelp("Flags:\n  -table string\n  -tombstone-on-null-payload\n", ""); f.recordFormat || f.expandFlag != "" || f.tombstones {
		t.Fatalf("%+v", f)
	}
}

func TestProcParsing(t *testing.T) {
	cpu, err := parseStatCPU("1234 (java (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0")
	if err != nil || cpu != 3 {
		t.Fatalf("%v %v", cpu, err)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Fatal("no error")
	}
	if got := parseVmHWM("Name:\tjava\nVmHWM:\t  2048 kB\nVmRSS:\t 1024 kB\n"); got != 2048<<10 {
		t.Fatalf("VmHWM %d", got)
	}
}

func TestDrainStats(t *testing.T) {
	d := &drainResult{Events: 1000}
	for i := 0; i <= 10; i++ {
		d.Samples = append(d.Samples, sample{at: time.Duration(i+1) * time.Second, delivered: int64(i * 100), cpu: float64(i) * 0.5, hwm: int64(i) << 20})
	}
	s := d.stats()
	if s.FirstEvent != 2*time.Second || s.AllEvents != 11*time.Second || s.PeakRSS != 10<<20 {
		t.Fatalf("%+v", s)
	}
	// 10 % at sample 1 (2 s), 90 % at sample 9 (10 s): 800 events in 8 s, 4 CPU-s.
	if s.SteadyRate != 100 || s.CPUSteady != 4 || s.CPUPer100k != 500 {
		t.Fatalf("%+v", s)
	}
}

func TestSpliceSection(t *testing.T) {
	sec := sectionStart + "\nnew\n" + sectionEnd
	doc := "# B\n\nbefore\n\n" + sectionStart + "\nold\n" + sectionEnd + "\n\nafter\n"
	if got := spliceSection(doc, sec); got != "# B\n\nbefore\n\n"+sec+"\n\nafter\n" {
		t.Fatalf("%q", got)
	}
	if got := spliceSection("# B\n\ntext\n\n", sec); got != "# B\n\ntext\n\n"+sec+"\n" {
		t.Fatalf("%q", got)
	}
	if got := group(1234567); got != "1,234,567" {
		t.Fatal(got)
	}
}

// TestPayloadCasesAreJSON: every generated payload and headers value is
// valid JSON (PostgreSQL would refuse the insert otherwise).
func TestPayloadCasesAreJSON(t *testing.T) {
	nulls := 0
	for _, r := range compareRows(500, 1, true) {
		if r.payload == nil {
			nulls++
			continue
		}
		if !json.Valid([]byte(*r.payload)) {
			t.Fatalf("payload %s", *r.payload)
		}
		if r.headers != nil {
			var m map[string]string
			if err := json.Unmarshal([]byte(*r.headers), &m); err != nil {
				t.Fatalf("headers %s: %v", *r.headers, err)
			}
		}
	}
	if nulls != 500/nullEvery {
		t.Fatalf("%d NULL payloads", nulls)
	}
}

func TestMedianStatsAndTable(t *testing.T) {
	mk := func(name string, secs ...float64) []*drainResult {
		var out []*drainResult
		for _, s := range secs {
			d := &drainResult{Name: name, Events: 100}
			d.Samples = []sample{{at: time.Duration(s*float64(time.Second)) / 2, delivered: 50, cpu: s / 2, hwm: 1 << 20},
				{at: time.Duration(s * float64(time.Second)), delivered: 100, cpu: s, hwm: int64(s) << 20}}
			out = append(out, d)
		}
		return out
	}
	relay, connect := mk("relay", 1, 3, 2), mk("connect", 10, 30, 20)
	m := medianStats(relay)
	if m.AllEvents != 2*time.Second || m.RateFromStart != 50 || m.CPUTotal != 2 || m.PeakRSS != 2<<20 {
		t.Fatalf("%+v", m)
	}
	var rounds [][2]*drainResult
	for i := range relay {
		rounds = append(rounds, [2]*drainResult{relay[i], connect[i]})
	}
	rows := drainRows(rounds)
	if len(rows) != 3 || rows[1][0] != "relay" || rows[2][4] != "5" || rows[2][8] != "20.0 MiB" {
		t.Fatalf("%v", rows)
	}
	if got := ratios(rounds); !strings.Contains(got, "10.0 × the events/s from process start") || !strings.Contains(got, "1/10 of its CPU") {
		t.Fatal(got)
	}
	if got := roundsLine(rounds); !strings.Contains(got, "round 2 (Connect first): relay 33 / ") {
		t.Fatal(got)
	}
	if got := mib(1536 << 20); got != "1,536.0 MiB" {
		t.Fatal(got)
	}
}
