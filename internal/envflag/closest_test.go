package envflag

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

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
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
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

// TestEnvNames: a Binder lists every variable its flags read, the _FILE
// of secrets included; a Listing Binder lists the same without reading
// the environment or the files it names.
func TestEnvNames(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_NAME", "env")
	t.Setenv("T_PASSWORD_FILE", file)
	t.Setenv("T_COUNT", "many") // malformed: an error only when read
	want := []string{"T_NAME", "T_COUNT", "T_PASSWORD", "T_PASSWORD_FILE", "T_URL", "T_URL_FILE", "T_STANDBY_URL", "T_STANDBY_URL_FILE"}
	for _, listing := range []bool{false, true} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		b := New(fs, "T_")
		if listing {
			b = Listing(fs, "T_")
		}
		var name, password, url string
		var count int
		var standbys []string
		b.String(&name, "name", "default", "")
		b.Int(&count, "count", 1, "")
		b.Secret(&password, "password", "", "")
		b.ConnString(&url, "url", "", "")
		b.ConnStrings(&standbys, "standby-url", "")
		if got := b.EnvNames(); !slices.Equal(got, want) {
			t.Errorf("listing %t: EnvNames = %v, want %v", listing, got, want)
		}
		switch {
		case listing && (name != "default" || password != "" || count != 1 || len(b.Errs()) != 0 || b.IsSet("name")):
			t.Errorf("a Listing Binder read the environment: name %q, password %q, count %d, errs %v", name, password, count, b.Errs())
		case !listing && (name != "env" || password != "from-file" || len(b.Errs()) != 1 || !b.IsSet("name")):
			t.Errorf("New Binder: name %q, password %q, errs %v", name, password, b.Errs())
		}
	}
}
