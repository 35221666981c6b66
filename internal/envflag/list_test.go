package envflag

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func newListSet(t *testing.T) (*Binder, *[]string) {
	t.Helper()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := New(fs, "T_")
	var urls []string
	b.ConnStrings(&urls, "standby-url", "a standby")
	return b, &urls
}

// TestConnStrings: the flag repeats and takes commas; the environment's
// comma-separated list (or its _FILE) is replaced by a command line that
// uses the flag; every value's password is among the secrets; the usage
// never prints a value.
func TestConnStrings(t *testing.T) {
	t.Setenv("T_STANDBY_URL", "postgres://u:envpw@a/db, postgres://u@b/db")
	b, urls := newListSet(t)
	if want := []string{"postgres://u:envpw@a/db", "postgres://u@b/db"}; !slices.Equal(*urls, want) {
		t.Fatalf("from env: %q", *urls)
	}
	var usage strings.Builder
	b.PrintDefaults(&usage)
	if usage.String() != "  -standby-url string\n    \ta standby (env T_STANDBY_URL or T_STANDBY_URL_FILE) (set)\n" {
		t.Fatalf("usage %q", usage.String())
	}
	if err := b.Parse([]string{"--standby-url", "postgres://u:pw1@c/db", "--standby-url", "postgres://u:pw2@d/db,postgres://e/db"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"postgres://u:pw1@c/db", "postgres://u:pw2@d/db", "postgres://e/db"}; !slices.Equal(*urls, want) {
		t.Fatalf("from flags: %q", *urls)
	}
	if _, dsns := b.Secrets(); !slices.Equal(dsns, *urls) {
		t.Fatalf("secrets %q", dsns)
	}

	os.Unsetenv("T_STANDBY_URL")
	file := filepath.Join(t.TempDir(), "urls")
	if err := os.WriteFile(file, []byte("postgres://u:filepw@f/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_STANDBY_URL_FILE", file)
	if _, urls := newListSet(t); !slices.Equal(*urls, []string{"postgres://u:filepw@f/db"}) {
		t.Fatalf("from file: %q", *urls)
	}
}

func TestIsSet(t *testing.T) {
	set := func(args ...string) bool {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		b := New(fs, "T_")
		var on bool
		b.Bool(&on, "failover-slot", true, "")
		if err := b.Parse(args); err != nil {
			t.Fatal(err)
		}
		return b.IsSet("failover-slot")
	}
	if set() {
		t.Fatal("a default counts as set")
	}
	if !set("--failover-slot") || !set("--failover-slot=false") {
		t.Fatal("the command line does not count as set")
	}
	t.Setenv("T_FAILOVER_SLOT", "true")
	if !set() {
		t.Fatal("the environment does not count as set")
	}
}
