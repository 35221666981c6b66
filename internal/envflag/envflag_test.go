package envflag

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "16MiB": 16 << 20, "16mib": 16 << 20, "900KiB": 900 << 10,
		"50GB": 50e9, "1.5GiB": 3 << 29, "2 MB": 2e6, "10B": 10, "1TiB": 1 << 40, "-1": -1,
	} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "16M", "MiB", "1.5", "1e3", "99999999TiB", "16 MiBs"} {
		if _, err := ParseSize(in); err == nil || !strings.HasPrefix(err.Error(), "not a size") {
			t.Errorf("ParseSize(%q) accepted or unclear: %v", in, err)
		}
	}
	for n, want := range map[int64]string{0: "0", 16 << 20: "16MiB", 921600: "900KiB", 1000: "1000", 1 << 40: "1TiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Errorf("FormatSize(%d) does not parse back: %d %v", n, back, err)
		}
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"7d": 7 * 24 * time.Hour, "1.5d": 36 * time.Hour, "1d12h": 36 * time.Hour, "500ms": 500 * time.Millisecond,
		"0": 0, "-1h": -time.Hour, "-2d": -48 * time.Hour, "168h": 168 * time.Hour,
	} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "7", "soon", "1d-2h", "7days", "--1h"} {
		if _, err := ParseDuration(in); err == nil || !strings.HasPrefix(err.Error(), "not a duration") {
			t.Errorf("ParseDuration(%q) accepted or unclear: %v", in, err)
		}
	}
}

// TestSameMessageFromFlagAndEnv: a malformed value reads the same after
// its source, whether typed as a flag or set in the environment.
func TestSameMessageFromFlagAndEnv(t *testing.T) {
	newSet := func() (*Binder, *int64, *bool) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		b := New(fs, "T_")
		var n int64
		var on bool
		b.Size(&n, "max-bytes", 1<<20, "")
		b.Bool(&on, "on", false, "")
		return b, &n, &on
	}
	t.Setenv("T_MAX_BYTES", "lots")
	b, n, _ := newSet()
	envErr := b.Errs()
	if len(envErr) != 1 || *n != 1<<20 {
		t.Fatalf("env errors %v, value %d", envErr, *n)
	}
	t.Setenv("T_MAX_BYTES", "2MiB")
	b, n, on := newSet()
	flagErr := b.Parse([]string{"--max-bytes", "lots"})
	env, fl := envErr[0].Error(), flagErr.Error()
	if !strings.HasPrefix(env, `T_MAX_BYTES="lots": not a size`) || !strings.HasPrefix(fl, `--max-bytes "lots": not a size`) ||
		env[strings.Index(env, ":"):] != fl[strings.Index(fl, ":"):] {
		t.Fatalf("messages differ:\n env  %s\n flag %s", env, fl)
	}
	if err := b.Parse([]string{"--max-bytes", "3MiB", "--on"}); err != nil || *n != 3<<20 || !*on {
		t.Fatalf("valid flags: %v %d %v", err, *n, *on)
	}
	if err := b.Parse([]string{"--nope"}); err == nil || err.Error() != "unknown flag --nope" {
		t.Fatalf("unknown flag: %v", err)
	}
	if err := b.Parse([]string{"--on=maybe"}); err == nil || err.Error() != `--on "maybe": not a boolean: use true or false` {
		t.Fatalf("bad bool: %v", err)
	}
}

func TestPrintDefaultsNamesTypes(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	b := New(fs, "T_")
	var n int64
	var d time.Duration
	var s string
	b.Size(&n, "max-bytes", 16<<20, "most bytes")
	b.Duration(&d, "wait", 7*24*time.Hour, "how long")
	b.Secret(&s, "password", "", "the password")
	var out strings.Builder
	b.PrintDefaults(&out)
	want := "  -max-bytes size\n    \tmost bytes (env T_MAX_BYTES) (default 16MiB)\n" +
		"  -password string\n    \tthe password (env T_PASSWORD or T_PASSWORD_FILE)\n" +
		"  -wait duration\n    \thow long (env T_WAIT) (default 168h0m0s)\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

// TestPrintDefaultsHidesSecrets: a secret flag's value from the
// environment or from its _FILE is the flag's default, and the usage shows
// "(set)" for it, never the value (issue 36: `run --help` printed the
// database URL and the SASL password). Other flags still show theirs.
func TestPrintDefaultsHidesSecrets(t *testing.T) {
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte("postgres://u:FileSecret@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_DATABASE_URL_FILE", file)
	t.Setenv("T_PASSWORD", "EnvSecret")
	t.Setenv("T_USER", "alice")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	b := New(fs, "T_")
	var url, password, empty, user string
	b.ConnString(&url, "database-url", "", "the database")
	b.Secret(&password, "password", "", "the password")
	b.Secret(&empty, "token", "", "a token")
	b.String(&user, "user", "", "the user")
	if url != "postgres://u:FileSecret@h/db" || password != "EnvSecret" {
		t.Fatalf("values %q %q", url, password)
	}
	var out strings.Builder
	b.PrintDefaults(&out)
	usage := out.String()
	for _, secret := range []string{"FileSecret", "EnvSecret", "postgres://"} {
		if strings.Contains(usage, secret) {
			t.Errorf("usage shows %q:\n%s", secret, usage)
		}
	}
	for _, want := range []string{
		"the database (env T_DATABASE_URL or T_DATABASE_URL_FILE) (set)\n",
		"the password (env T_PASSWORD or T_PASSWORD_FILE) (set)\n",
		"a token (env T_TOKEN or T_TOKEN_FILE)\n",
		`the user (env T_USER) (default "alice")`,
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}

// TestSharedBounds: what no flag of a kind means is refused where the
// value is parsed, from the command line and the environment alike
// (issue 36: a generated test in cmd/outbox-relay covers every flag).
func TestSharedBounds(t *testing.T) {
	var (
		s    string
		n    int
		d    time.Duration
		size int64
	)
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	b := New(fs, "T_")
	b.String(&s, "name", "x", "a name")
	b.Int(&n, "count", 1, "a count")
	b.Duration(&d, "every", time.Second, "a cadence")
	b.Size(&size, "bytes", 1, "a size")
	var pw string
	b.Secret(&pw, "password", "", "a secret")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", ""}, `empty: leave the flag out for its default, "x"`},
		{[]string{"--name", "a\nb"}, "control character U+000A at byte 1"},
		{[]string{"--name", "\xff"}, "not valid UTF-8"},
		{[]string{"--name", strings.Repeat("x", 5000)}, `"` + strings.Repeat("x", 64) + `"… (5000 bytes): too long: 5000 bytes, at most 4096`},
		{[]string{"--count", "2147483648"}, "out of range: at most 2147483647"},
		{[]string{"--every", "-1s"}, "negative: use 0 or more"},
		{[]string{"--every", "3651d"}, "out of range: at most 3650d"},
		{[]string{"--every", "1e300d"}, "not a duration"},
		{[]string{"--bytes", "-1"}, "negative: use 0 or more"},
		{[]string{"--bytes", "2PiB"}, "not a size"},
		{[]string{"--bytes", "2000TiB"}, "out of range: at most 1PiB"},
		{[]string{"--password", "hunter2\x00"}, "--password (value hidden): control character U+0000 at byte 7"},
	} {
		err := b.Parse(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	if err := b.Parse([]string{"--password", "host=db\nuser=relay\tdbname=app"}); err != nil {
		t.Errorf("a key=value connection string over lines: %v", err)
	}
	if d, err := ParseDuration("106752d"); err == nil {
		t.Errorf("ParseDuration(106752d) = %s, want an error (overflow)", d)
	}
}
