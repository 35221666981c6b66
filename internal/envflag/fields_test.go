package envflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

type level string

type testConfig struct {
	Name    string
	Publish struct {
		MaxBatch      int
		MaxBatchBytes int
		Level         level
	}
	Wait time.Duration
	NoX  bool
}

// TestFieldsDerivePaths: a flag bound to a field of a registered struct
// sets that field's Go path, whatever the flag is called; FieldError and
// FlagText name the flag for it, longest path first.
func TestFieldsDerivePaths(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := New(fs, "T_")
	var c testConfig
	var own string
	b.Fields(&c, "")
	b.String(&c.Name, "name", "n", "")
	b.Int(&c.Publish.MaxBatch, "max-batch", 10, "")
	b.IntSize(&c.Publish.MaxBatchBytes, "max-batch-bytes", 1024, "")
	StringVar(b, &c.Publish.Level, "level", "info", "")
	b.NotBool(&c.NoX, "x", true, "")
	b.String(&own, "own", "", "") // not a field: no path
	if c.NoX || c.Publish.Level != "info" {
		t.Fatalf("defaults %+v", c)
	}
	want := map[string]string{"Name": "--name", "Publish.MaxBatch": "--max-batch", "Publish.MaxBatchBytes": "--max-batch-bytes",
		"Publish.Level": "--level", "NoX": "--x=false"}
	got := b.FlagNames()
	if len(got) != len(want) {
		t.Fatalf("flag names %v, want %v", got, want)
	}
	for f, n := range want {
		if got[f] != n {
			t.Errorf("%s: flag %q, want %q", f, got[f], n)
		}
	}
	if err := b.Parse([]string{"--x=false", "--level", "debug"}); err != nil || !c.NoX || c.Publish.Level != "debug" {
		t.Fatalf("parse: %v %+v", err, c)
	}
	if v, ok := b.FieldValue("NoX"); !ok || v != "false" {
		t.Fatalf("FieldValue(NoX) = %q, %v", v, ok)
	}
	err := b.FieldError("Publish.MaxBatch", false, " 0: use at most Publish.MaxBatchBytes (1024)")
	if err == nil || err.Error() != "--max-batch 0: use at most --max-batch-bytes (1024)" {
		t.Fatalf("FieldError: %v", err)
	}
	text := FlagText(b.FlagNames())
	if got := text("record exceeds Publish.MaxBatchBytes; raise Publish.MaxBatch or NoX"); got != "record exceeds --max-batch-bytes; raise --max-batch or --x=false" {
		t.Fatalf("FlagText: %q", got)
	}
}

// TestStringVarAndNotBoolUsage: typed strings print like strings, a
// negated bool like a bool, in the usage.
func TestStringVarAndNotBoolUsage(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	b := New(fs, "T_")
	var l level
	var no bool
	StringVar(b, &l, "level", "info", "the level")
	b.NotBool(&no, "on", true, "turned on")
	var out strings.Builder
	b.PrintDefaults(&out)
	want := "  -level string\n    \tthe level (env T_LEVEL) (default \"info\")\n" +
		"  -on\n    \tturned on (env T_ON) (default true)\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
	t.Setenv("T_ON", "false")
	b = New(flag.NewFlagSet("t", flag.ContinueOnError), "T_")
	b.NotBool(&no, "on", true, "")
	if !no || len(b.Errs()) != 0 {
		t.Fatalf("T_ON=false: %v %v", no, b.Errs())
	}
}
