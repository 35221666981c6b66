package main

import (
	"fmt"
	"strings"
)

// The relay's --record-format values the bench runs (-formats): native,
// and the schema registry formats of issue 48, whose relay encodes every
// payload with a schema the bench registered for its topic.
const (
	formatNative     = "native"
	formatAvro       = "avro"
	formatProtobuf   = "protobuf"
	formatJSONSchema = "json-schema"
)

var allFormats = []string{formatNative, formatAvro, formatProtobuf, formatJSONSchema}

// variant is how the relay of one drain or latency run differs from the
// defaults: its --delivery and its --record-format. A run's results carry
// it, so the side-by-side sections (renderDeliveries, renderFormats)
// select the runs of one variant. Format is empty for native, so the
// results of a default run are what they were before formats existed.
type variant struct {
	Delivery string `json:"delivery,omitempty"`
	Format   string `json:"format,omitempty"`
}

func newVariant(delivery, format string) variant {
	if format == formatNative {
		format = ""
	}
	return variant{Delivery: delivery, Format: format}
}

// format is the relay's --record-format.
func (v variant) format() string {
	if v.Format == "" {
		return formatNative
	}
	return v.Format
}

// registry reports whether the relay encodes with a registered schema.
func (v variant) registry() bool { return v.Format != "" }

// String names the variant in labels: the delivery, and the format
// unless native ("at-least-once", "exactly-once, avro").
func (v variant) String() string {
	if v.registry() {
		return v.Delivery + ", " + v.Format
	}
	return v.Delivery
}

// short names what differs from the default variant, for the plot's
// labels: "" for at-least-once native, else e.g. " avro", " exactly-once".
func (v variant) short() string {
	var s string
	if v.Delivery == deliveryEOS {
		s += " exactly-once"
	}
	if v.registry() {
		s += " " + v.Format
	}
	return s
}

// tag is the suffix of the names of a run's table, slot, publication and
// log files, so every run has fresh ones: empty for the default variant
// in round 1 (the names a run without -delivery, -formats and -rounds
// always had).
func (v variant) tag(round int) string {
	var s string
	if v.Delivery == deliveryEOS {
		s += "_eos"
	}
	if v.registry() {
		s += "_" + strings.ReplaceAll(v.Format, "-", "_")
	}
	if round > 1 {
		s += fmt.Sprintf("_r%d", round)
	}
	return s
}

// variants are the relays each round of drain and latency runs, in
// order: every format per delivery (at-least-once native, avro, …, then
// exactly-once native, avro, …).
func (c *config) variants() []variant {
	var out []variant
	for _, d := range c.Deliveries {
		for _, f := range c.Formats {
			out = append(out, newVariant(d, f))
		}
	}
	return out
}

// registryFormats are the -formats that need a schema registry.
func (c *config) registryFormats() []string {
	var out []string
	for _, f := range c.Formats {
		if f != formatNative {
			out = append(out, f)
		}
	}
	return out
}

// parseFormats reads -formats: a comma-separated list of allFormats,
// each once.
func parseFormats(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !contains(allFormats, f) {
			return nil, fmt.Errorf("unknown format %q (want %s)", f, strings.Join(allFormats, ","))
		}
		if contains(out, f) {
			return nil, fmt.Errorf("format %q given twice", f)
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("empty list")
	}
	return out, nil
}
