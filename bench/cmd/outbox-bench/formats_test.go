package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

func parseArgs(t *testing.T, args ...string) (*config, error) {
	t.Helper()
	base := []string{"-database-url", "postgres://x", "-kafka-brokers", "k:9092", "-log-dir", t.TempDir()}
	return parseFlags(append(base, args...), io.Discard)
}

func TestParseFormatsFlag(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL", "")
	t.Setenv("TEST_SCHEMA_REGISTRY_URL", "http://reg/apis/ccompat/v7")
	cfg, err := parseArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Formats, []string{formatNative}) || len(cfg.registryFormats()) != 0 {
		t.Fatalf("default formats %v", cfg.Formats)
	}
	if got := cfg.variants(); !slices.Equal(got, []variant{{Delivery: deliveryALO}}) {
		t.Fatalf("default variants %v", got)
	}

	cfg, err = parseArgs(t, "-formats", " native, avro,protobuf", "-delivery", "both")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RegistryURL != "http://reg/apis/ccompat/v7" {
		t.Fatalf("registry URL %q: want $TEST_SCHEMA_REGISTRY_URL", cfg.RegistryURL)
	}
	want := []variant{{deliveryALO, ""}, {deliveryALO, formatAvro}, {deliveryALO, formatProtobuf},
		{deliveryEOS, ""}, {deliveryEOS, formatAvro}, {deliveryEOS, formatProtobuf}}
	if got := cfg.variants(); !slices.Equal(got, want) {
		t.Fatalf("variants %v, want %v", got, want)
	}
	if got := cfg.registryFormats(); !slices.Equal(got, []string{formatAvro, formatProtobuf}) {
		t.Fatalf("registry formats %v", got)
	}

	t.Setenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL", "http://other")
	if cfg, err := parseArgs(t, "-formats", "json-schema"); err != nil || cfg.RegistryURL != "http://other" {
		t.Fatalf("$OUTBOX_RELAY_SCHEMA_REGISTRY_URL first: %v %v", cfg, err)
	}

	for args, msg := range map[string]string{
		"-formats xml":                        `unknown format "xml"`,
		"-formats avro,avro":                  `format "avro" given twice`,
		"-formats ,":                          "-formats: empty list",
		"-formats avro -schema-registry-url=": "needs -schema-registry-url",
	} {
		if _, err := parseArgs(t, strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: error %v, want %q", args, err, msg)
		}
	}
	if _, err := parseArgs(t, "-formats", "native", "-schema-registry-url="); err != nil {
		t.Fatalf("native needs no registry: %v", err)
	}
}

func TestVariantNames(t *testing.T) {
	for _, tc := range []struct {
		v            variant
		round        int
		str, tag, sh string
	}{
		{newVariant(deliveryALO, formatNative), 1, "at-least-once", "", ""},
		{newVariant(deliveryALO, formatNative), 2, "at-least-once", "_r2", ""},
		{newVariant(deliveryEOS, formatNative), 1, "exactly-once", "_eos", " exactly-once"},
		{newVariant(deliveryALO, formatAvro), 1, "at-least-once, avro", "_avro", " avro"},
		{newVariant(deliveryEOS, formatJSONSchema), 3, "exactly-once, json-schema", "_eos_json_schema_r3", " exactly-once json-schema"},
	} {
		if got := tc.v.String(); got != tc.str {
			t.Errorf("%#v: String %q, want %q", tc.v, got, tc.str)
		}
		if got := tc.v.tag(tc.round); got != tc.tag {
			t.Errorf("%#v round %d: tag %q, want %q", tc.v, tc.round, got, tc.tag)
		}
		if got := tc.v.short(); got != tc.sh {
			t.Errorf("%#v: short %q, want %q", tc.v, got, tc.sh)
		}
	}
	d := drainResult{Mode: 1, variant: newVariant(deliveryALO, formatNative), Round: 1}
	if got := d.modeLabel(); got != "1 (at-least-once, round 1)" {
		t.Fatalf("a default drain's label changed: %q", got)
	}
	if got := d.checkSuffix(); got != "" {
		t.Fatalf("a default drain's target line changed: suffix %q", got)
	}
	d.variant = newVariant(deliveryALO, formatAvro)
	if got := d.modeLabel(); got != "1 (at-least-once, avro, round 1)" {
		t.Fatalf("avro drain label %q", got)
	}
	if got := d.checkSuffix(); got != " (at-least-once, avro, round 1)" {
		t.Fatalf("avro drain target suffix %q", got)
	}
}

func formatResults() *results {
	v := func(f string) variant { return newVariant(deliveryALO, f) }
	drain := func(f string, sec float64, round int) drainResult {
		return drainResult{Mode: 1, Events: 1000, CeilingSec: 0.5, RelaySec: sec, variant: v(f), Round: round,
			relayStats: relayStats{RelayCPU: 0.02}}
	}
	lat := func(f string, p99 float64) latencyResult {
		return latencyResult{Target: 1000, TxSize: 1, Samples: 1, ConsP50: 1, ConsP99: p99, variant: v(f), RelayCPUPer100k: 1.5}
	}
	return &results{
		Drains: []drainResult{
			drain(formatNative, 1, 1), drain(formatAvro, 1.05, 1), drain(formatProtobuf, 1.25, 1),
			drain(formatNative, 1, 2), drain(formatAvro, 1.05, 2), drain(formatProtobuf, 1.25, 2),
		},
		Latency: []latencyResult{lat(formatNative, 4), lat(formatAvro, 5), lat(formatProtobuf, 7.5)},
		Decodes: []decodeResult{{variant: v(formatAvro), Round: 1, Checked: 100}, {variant: v(formatProtobuf), Round: 1, Checked: 100, Error: "field note = y"}},
	}
}

func TestFormatChecks(t *testing.T) {
	r := formatResults()
	got := map[string]bool{}
	for _, c := range r.formatChecks() {
		got[c.Name] = c.Pass
	}
	want := map[string]bool{
		"drain, 1-event transactions: avro ≥ 90 % of native":                                                                     true,  // 95 %
		"drain, 1-event transactions: protobuf ≥ 90 % of native":                                                                 false, // 80 %
		"avro: p99 commit-to-visible at 1000 events/s, 1-event transactions ≤ native + 2 ms":                                     true,  // +1 ms
		"protobuf: p99 commit-to-visible at 1000 events/s, 1-event transactions ≤ native + 2 ms":                                 false, // +3.5 ms
		"at-least-once, avro (round 1): records decode with their registered schema, every field equal to the row's payload":     true,
		"at-least-once, protobuf (round 1): records decode with their registered schema, every field equal to the row's payload": false,
	}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for name, pass := range want {
		if p, ok := got[name]; !ok || p != pass {
			t.Errorf("check %q: pass %v (present %v), want %v", name, p, ok, pass)
		}
	}
	// The checks are among the run's targets.
	n := 0
	for _, c := range r.checks() {
		if _, ok := want[c.Name]; ok {
			n++
		}
	}
	if n != len(want) {
		t.Fatalf("%d of the format checks in checks()", n)
	}
	// The drain targets and the peak RSS name a registry relay's drain.
	r.Drains[2].PeakRSS, r.Drains[0].PeakRSS = 80<<20, 50<<20
	var names, rss []string
	for _, c := range r.checks() {
		if strings.HasPrefix(c.Name, "drain, 1-event transactions") && strings.HasSuffix(c.Name, "pg_recvlogical") {
			names = append(names, c.Name)
		}
		if strings.HasPrefix(c.Name, "peak RSS") {
			rss = append(rss, c.Detail)
		}
	}
	if len(names) != 6 || names[0] != "drain, 1-event transactions ≥ 0.9 × pg_recvlogical" ||
		names[5] != "drain, 1-event transactions (at-least-once, protobuf, round 2) ≥ 0.9 × pg_recvlogical" {
		t.Errorf("drain target lines %q", names)
	}
	if len(rss) != 1 || rss[0] != "80.0 MiB (VmHWM, the drain of 1-event transactions (at-least-once, protobuf, round 1))" {
		t.Errorf("peak RSS %q", rss)
	}
}

func TestRenderFormats(t *testing.T) {
	md := renderFormats(formatResults())
	for _, s := range []string{
		"### Registry formats against native",
		"interleaved (native, avro, protobuf …)",
		"| 1-event tx | native | 1,000, 1,000 | 1,000 | – | 0.50 | 2,000 | 20.0 µs |",
		"| 1-event tx | avro | 952, 952 | 952 | **95 %** | 0.48 | 2,000 | 20.0 µs |",
		"| 1-event tx | protobuf | 800, 800 | 800 | **80 %** | 0.40 | 2,000 | 20.0 µs |",
		"| 1,000 | 1 | native | 1.0 / 4.0 ms | 4.0 ms | – | 15.0 µs |",
		"| 1,000 | 1 | avro | 1.0 / 5.0 ms | 5.0 ms | **+1.0 ms** | 15.0 µs |",
		"| 1,000 | 1 | protobuf | 1.0 / 7.5 ms | 7.5 ms | **+3.5 ms** | 15.0 µs |",
		"avro, round 1: 100 records, every field equal; protobuf, round 1: 100 records, FAILED: field note = y",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("missing %q in\n%s", s, md)
		}
	}
	// With two deliveries the rows name theirs.
	r := formatResults()
	r.Drains = append(r.Drains, drainResult{Mode: 1, Events: 1000, RelaySec: 1, variant: newVariant(deliveryEOS, formatNative), Round: 1})
	if md := renderFormats(r); !strings.Contains(md, "| 1-event tx, exactly-once | native |") || !strings.Contains(md, "| 1-event tx, at-least-once | avro |") {
		t.Errorf("two deliveries:\n%s", md)
	}
}

// TestNoFormatsSection: a run of native only (the default) has neither
// the section nor its checks, and the delivery comparison still selects
// the native relays.
func TestNoFormatsSection(t *testing.T) {
	r := formatResults()
	var native []drainResult
	for _, d := range r.Drains {
		if !d.registry() {
			native = append(native, d)
		}
	}
	r.Drains, r.Latency, r.Decodes = native, r.Latency[:1], nil
	if md := renderFormats(r); md != "" {
		t.Fatalf("native only: section\n%s", md)
	}
	if cs := r.formatChecks(); cs != nil {
		t.Fatalf("native only: checks %v", cs)
	}
	// Formats without native: nothing to compare with.
	r = formatResults()
	r.Drains, r.Latency = r.Drains[1:2], r.Latency[1:2]
	if md := renderFormats(r); md != "" {
		t.Fatalf("avro only: section\n%s", md)
	}
}

func TestCheckPayload(t *testing.T) {
	const j = 12345
	note := strings.Repeat("x", 175)
	// 12345 * 7919 % 100000 = 60055
	avro := `{"order_id":12345,"customer_id":"cust-2345","amount_cents":60055,"currency":"EUR","status":"confirmed","note":"` + note + `"}`
	if err := checkPayload([]byte(avro), j); err != nil {
		t.Fatalf("avro's JSON: %v", err)
	}
	// protojson writes an int64 as a string.
	pb := strings.Replace(avro, `"order_id":12345`, `"order_id":"12345"`, 1)
	if err := checkPayload([]byte(pb), j); err != nil {
		t.Fatalf("protobuf's JSON: %v", err)
	}
	for name, bad := range map[string]string{
		"wrong number":  strings.Replace(avro, `60055`, `60056`, 1),
		"missing field": strings.Replace(avro, `"currency":"EUR",`, ``, 1),
		"extra field":   strings.Replace(avro, `{`, `{"x":1,`, 1),
		"not JSON":      "\x00\x01",
	} {
		if err := checkPayload([]byte(bad), j); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
