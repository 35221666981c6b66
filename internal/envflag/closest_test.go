package envflag

import (
	"testing"

	edlib "github.com/hbollon/go-edlib"
)

// TestDistance pins the distance Closest uses (the library's).
func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "ABC", 3},
		{"ABC", "", 3},
		{"SLOT", "SLOT", 0},
		{"MAX_INFLIGHT_EVNTS", "MAX_INFLIGHT_EVENTS", 1}, // a letter left out
		{"KAFKA_BROKER", "KAFKA_BROKERS", 1},
		{"LOGLEVEL", "LOG_LEVEL", 1},
		{"KAFKA_BRKOERS", "KAFKA_BROKERS", 1}, // two letters swapped: one edit
		{"TABEL", "TABLE", 1},
		{"SLOT", "SLIT", 1},
		{"METRICS_ADDRESS", "METRICS_ADDR", 3},
		{"CA", "ABC", 3}, // optimal string alignment: no edit of a swapped pair
		{"kitten", "sitting", 3},
		{"ÄB", "BÄ", 1}, // runes, not bytes
	} {
		if got := edlib.OSADamerauLevenshteinDistance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := edlib.OSADamerauLevenshteinDistance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", c.b, c.a, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"MAX_INFLIGHT_EVENTS", "MAX_INFLIGHT_BYTES", "MAX_BATCH", "MAX_BATCH_BYTES", "KAFKA_BROKERS",
		"LOG_LEVEL", "LOG_FORMAT", "SLOT", "TABLE", "ALL", "DATABASE_URL", "DATABASE_URL_FILE"}
	for in, want := range map[string]string{
		"MAX_INFLIGHT_EVNTS": "MAX_INFLIGHT_EVENTS",
		"MAX_INFLIGHT_BYTE":  "MAX_INFLIGHT_BYTES",
		"KAFKA_BRKOERS":      "KAFKA_BROKERS",
		"LOGLEVEL":           "LOG_LEVEL",
		"LOG_LVL":            "LOG_LEVEL", // 2 edits in 7 letters
		"SLTO":               "SLOT",
		"TABLES":             "TABLE",
		"DATABASE_URL_FIEL":  "DATABASE_URL_FILE",
		"MAX_BATCH":          "MAX_BATCH", // a known name is its own closest
		// Nothing close: no suggestion rather than a wrong one.
		"FOO":          "",
		"DEBUG":        "",
		"SLOT_NAME":    "",
		"PORT":         "",
		"MAX_INFLIGHT": "",
		"":             "",
	} {
		if got := Closest(in, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", in, got, want)
		}
	}
	// Equally close: the alphabetically first, whatever the order.
	for _, c := range [][]string{{"SLOTB", "SLOTA"}, {"SLOTA", "SLOTB"}} {
		if got := Closest("SLOT", c); got != "SLOTA" {
			t.Errorf("Closest(SLOT, %v) = %q, want SLOTA", c, got)
		}
	}
	if got := Closest("SLOT", nil); got != "" {
		t.Errorf("Closest without candidates = %q", got)
	}
}
