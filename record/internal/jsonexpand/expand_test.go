package jsonexpand

import (
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestDebeziumExpandMatchesRouter checks the expansion against the values
// Debezium's router and Connect's JsonConverter wrote for the same
// payloads (testdata/debezium-expand.txt, recorded from the Java classes).
func TestDebeziumExpandMatchesRouter(t *testing.T) {
	raw, err := os.ReadFile("testdata/debezium-expand.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		in, want, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		got := string(Payload([]byte(in)))
		if want == "FAIL" {
			// The router stops; the relay writes the text as a JSON string.
			var s string
			if err := json.Unmarshal([]byte(got), &s); err != nil || s != in {
				t.Errorf("%s: %s, want the payload as a JSON string", in, got)
			}
		} else if got != want {
			t.Errorf("%s\n got  %s\n want %s", in, got, want)
		}
		n++
	}
	if n < 20 {
		t.Fatalf("only %d cases", n)
	}
}

func TestJavaDouble(t *testing.T) {
	for f, want := range map[float64]string{
		0: "0.0", 1: "1.0", -1.5: "-1.5", 100: "100.0", 1e7: "1.0E7", 9999999: "9999999.0", 1e-3: "0.001", 9.9e-4: "9.9E-4",
		12345678.5: "1.23456785E7", 1.5e300: "1.5E300", 0.30000000000000004: "0.30000000000000004", 123456.789: "123456.789",
		math.MaxFloat64: "1.7976931348623157E308", math.Inf(1): `"Infinity"`,
	} {
		if got := string(appendJavaDouble(nil, f)); got != want {
			t.Errorf("%v: %s, want %s", f, got, want)
		}
	}
}

// FuzzExpandJSON: the expansion never panics and always yields JSON:
// either an object (the expansion), or the payload as a JSON string
// (whenever the payload is not a JSON object the router can expand, e.g.
// anything not starting with '{').
func FuzzExpandJSON(f *testing.F) {
	for _, s := range []string{`{"a": 1, "b": null}`, `{"a": [{"x": 1}, {"y": [1.5, 2e300]}]}`, `[1]`, `{"a": [1, "x"]}`,
		`{"s": "\ud83d\ude00\u0001"}`, `{"n": 123456789012345678901234567890}`, `{"a": 01}`, `{"a":1,"a":{"b":[]}}`, "{\"a\": \"\xff\"}", `{`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		out := Payload(payload)
		if !json.Valid(out) {
			t.Fatalf("expansion of %q is not JSON: %q", payload, out)
		}
		switch out[0] {
		case '{':
			if len(payload) == 0 || payload[0] != '{' {
				t.Fatalf("%q expanded to %q", payload, out)
			}
		case '"':
			var s string
			if err := json.Unmarshal(out, &s); err != nil {
				t.Fatal(err)
			}
			if utf8.Valid(payload) && s != string(payload) {
				t.Fatalf("%q written as the string %q", payload, s)
			}
		default:
			t.Fatalf("expansion of %q is %q", payload, out)
		}
	})
}

// FuzzJavaDouble: the Java rendering of a double reads back as the same
// double, in Java's notation (a fraction digit always; E only outside
// [1e-3, 1e7)).
func FuzzJavaDouble(f *testing.F) {
	for _, v := range []float64{0, 1, -1.5, 1e7, 9999999.999, 1e-3, 9.99e-4, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.1} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		s := string(appendJavaDouble(nil, v))
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != v || math.Signbit(back) != math.Signbit(v) {
			t.Fatalf("%v rendered %q, reads back %v (%v)", v, s, back, err)
		}
		mant, _, sci := strings.Cut(s, "E")
		if !strings.Contains(mant, ".") || strings.HasSuffix(mant, ".") {
			t.Fatalf("%v rendered %q: no fraction digit", v, s)
		}
		if a := math.Abs(v); sci == (a >= 1e-3 && a < 1e7) && a != 0 {
			t.Fatalf("%v rendered %q", v, s)
		}
	})
}
