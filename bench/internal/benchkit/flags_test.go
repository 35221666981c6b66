package benchkit

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStackFlags(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://env")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "env:9092")
	parse := func(args ...string) (string, []string, error) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := NewStackFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Values()
	}
	if url, brokers, err := parse(); err != nil || url != "postgres://env" || strings.Join(brokers, "|") != "env:9092" {
		t.Fatalf("from the environment: %q %q %v", url, brokers, err)
	}
	if url, brokers, err := parse("-database-url", "postgres://x", "-kafka-brokers", " a:1, ,b:2 "); err != nil || url != "postgres://x" || strings.Join(brokers, "|") != "a:1|b:2" {
		t.Fatalf("from the flags: %q %q %v", url, brokers, err)
	}
	for _, args := range [][]string{{"-database-url", ""}, {"-kafka-brokers", " , "}} {
		if _, _, err := parse(args...); err == nil || !strings.Contains(err.Error(), "scripts/stack.sh env") {
			t.Fatalf("%q: %v", args, err)
		}
	}
}

func TestLogDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	if got, err := LogDir(dir, "x-"); err != nil || got != dir {
		t.Fatalf("LogDir(%s) = %s, %v", dir, got, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("not made: %v", err)
	}
	t.Setenv("TMPDIR", t.TempDir())
	got, err := LogDir("", "bench-")
	if err != nil || !strings.HasPrefix(filepath.Base(got), "bench-") || filepath.Dir(got) != os.Getenv("TMPDIR") {
		t.Fatalf("LogDir(\"\") = %s, %v", got, err)
	}
}
