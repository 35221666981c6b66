package envflag

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
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
	if d, err := ParseDuration("106752d"); err == nil {
		t.Errorf("ParseDuration(106752d) = %s, want an error (overflow)", d)
	}
}

// testCmd is a command of every kind, declared as the binary declares
// its flags.
type testCmd struct {
	Name     string        `name:"name" default:"x" help:"a name"`
	Count    int           `name:"count" default:"1" help:"a count"`
	Every    time.Duration `name:"every" default:"1s" help:"a cadence"`
	MaxBytes int64         `name:"max-bytes" default:"16MiB" type:"size" help:"most bytes"`
	Password string        `name:"password" secret:"" help:"the password"`
	URL      string        `name:"database-url" secret:"dsn" help:"the database"`
	Token    string        `name:"token" secret:"" help:"a token"`
	User     string        `name:"user" help:"the user"`
	On       bool          `name:"on" help:"on"`
	Failover bool          `name:"failover" default:"true" negate:"" to:"NoFailover" help:"failover"`
	Every2   time.Duration `name:"every-two" to:"Timing.Every" rule:"Timing" help:"second cadence"`
	Every3   time.Duration `name:"every-three" to:"Timing.Bound" rule:"Timing" help:"its bound"`
	Standby  []string      `name:"standby-url" secret:"dsn" help:"standbys"`
}

// parseTest parses args as the test command's line.
func parseTest(t *testing.T, args ...string) (*kong.Context, *Env, error) {
	t.Helper()
	var g struct {
		T testCmd `cmd:""`
	}
	env := NewEnv("T_")
	k, err := kong.New(&g, append(Options(), kong.Resolvers(env), kong.Exit(func(int) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := k.Parse(append([]string{"t"}, args...))
	return ctx, env, err
}

// TestSameMessageFromFlagAndEnv: a malformed value reads the same after
// its source, whether typed as a flag or set in the environment.
func TestSameMessageFromFlagAndEnv(t *testing.T) {
	t.Setenv("T_MAX_BYTES", "lots")
	ctx, env, err := parseTest(t)
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(ctx, env)
	envErrs := set.EnvErrs()
	if len(envErrs) != 1 || set.IsSet("max-bytes") {
		t.Fatalf("env errors %v, set %v", envErrs, set.IsSet("max-bytes"))
	}
	os.Unsetenv("T_MAX_BYTES")
	_, _, err = parseTest(t, "--max-bytes", "lots")
	var ve *ValueError
	if !errors.As(err, &ve) {
		t.Fatalf("flag error %v is no ValueError", err)
	}
	env2, fl := envErrs[0].Error(), ve.Error()
	if !strings.HasPrefix(env2, `T_MAX_BYTES="lots": not a size`) || !strings.HasPrefix(fl, `--max-bytes "lots": not a size`) ||
		env2[strings.Index(env2, ":"):] != fl[strings.Index(fl, ":"):] {
		t.Fatalf("messages differ:\n env  %s\n flag %s", env2, fl)
	}
	if _, _, err := parseTest(t, "--on=maybe"); !errors.As(err, &ve) || ve.Error() != `--on="maybe": not a boolean: use true or false` {
		t.Fatalf("bad bool: %v", err)
	}
}

// TestSharedBounds: what no flag of a kind means is refused where the
// value is parsed, from the command line and the environment alike
// (issue 36: a generated test in cmd/outbox-relay covers every flag).
func TestSharedBounds(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--name", ""}, `empty: leave the flag out for its default, "x"`},
		{[]string{"--name", "a\nb"}, "control character U+000A at byte 1"},
		{[]string{"--name", "\xff"}, "not valid UTF-8"},
		{[]string{"--name", strings.Repeat("x", 5000)}, `"` + strings.Repeat("x", 64) + `"… (5000 bytes): too long: 5000 bytes, at most 4096`},
		{[]string{"--count", "2147483648"}, "out of range: at most 2147483647"},
		{[]string{"--count", "1.5"}, "not an integer"},
		{[]string{"--every", "-1s"}, "negative: use 0 or more"},
		{[]string{"--every", "3651d"}, "out of range: at most 3650d"},
		{[]string{"--every", "1e300d"}, "not a duration"},
		{[]string{"--max-bytes", "-1"}, "negative: use 0 or more"},
		{[]string{"--max-bytes", "2PiB"}, "not a size"},
		{[]string{"--max-bytes", "2000TiB"}, "out of range: at most 1PiB"},
		{[]string{"--password", "hunter2\x00"}, "--password (value hidden): control character U+0000 at byte 7"},
		{[]string{"--every"}, "flag needs a value: --every"},
	} {
		_, _, err := parseTest(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	if _, _, err := parseTest(t, "--password", "host=db\nuser=relay\tdbname=app", "--every", "-0s"); err != nil {
		t.Errorf("a key=value connection string over lines: %v", err)
	}
}

// TestEnvFallback: a flag left off the command line takes its variable,
// a secret its _FILE; both set is an error; the command line wins.
func TestEnvFallback(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_NAME", "env")
	t.Setenv("T_PASSWORD_FILE", file)
	t.Setenv("T_COUNT", "7")
	t.Setenv("T_STANDBY_URL", "a,b")
	ctx, env, err := parseTest(t, "--count", "9", "--standby-url", "c")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(ctx, env)
	var got testCmd
	for _, f := range set.Flags() {
		switch f.Name {
		case "name":
			got.Name = f.Target.String()
		case "password":
			got.Password = f.Target.String()
		case "count":
			got.Count = int(f.Target.Int())
		case "standby-url":
			got.Standby = f.Target.Interface().([]string)
		}
	}
	if got.Name != "env" || got.Password != "from-file" || got.Count != 9 || strings.Join(got.Standby, ",") != "c" {
		t.Errorf("values %+v", got)
	}
	if !set.IsSet("name") || !set.IsSet("count") || set.IsSet("user") || len(set.SecretFiles()) != 1 {
		t.Errorf("IsSet name %v count %v user %v; secret files %v", set.IsSet("name"), set.IsSet("count"), set.IsSet("user"), set.SecretFiles())
	}
	want := "T_NAME T_COUNT T_EVERY T_MAX_BYTES T_PASSWORD T_PASSWORD_FILE T_DATABASE_URL T_DATABASE_URL_FILE T_TOKEN T_TOKEN_FILE T_USER T_ON T_FAILOVER T_EVERY_TWO T_EVERY_THREE T_STANDBY_URL T_STANDBY_URL_FILE"
	if got := strings.Join(set.EnvNames(), " "); got != want {
		t.Errorf("EnvNames:\n got %s\nwant %s", got, want)
	}
	t.Setenv("T_PASSWORD", "too")
	ctx, env, _ = parseTest(t)
	if errs := NewSet(ctx, env).EnvErrs(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "both T_PASSWORD and T_PASSWORD_FILE are set") {
		t.Errorf("both set: %v", errs)
	}
}

// TestSetFill: flags fill the fields their to tags name, negated and
// converted; errors name them as flags, a rule's with every flag.
func TestSetFill(t *testing.T) {
	type timing struct{ Every, Bound time.Duration }
	type kind string
	var dst struct {
		NoFailover bool
		Timing     timing
		Name       kind
	}
	ctx, env, err := parseTest(t, "--failover=false", "--every-two", "2s", "--every-three", "3s")
	if err != nil {
		t.Fatal(err)
	}
	set := NewSet(ctx, env)
	set.Fill(&dst)
	if !dst.NoFailover || dst.Timing != (timing{2 * time.Second, 3 * time.Second}) {
		t.Errorf("filled %+v", dst)
	}
	names := set.Names()
	if names["NoFailover"] != "--failover=false" || names["Timing.Every"] != "--every-two" {
		t.Errorf("names %v", names)
	}
	text := strings.NewReplacer("Timing.Bound", "--every-three").Replace
	if err := set.FieldError("Timing", false, ": the bound must be larger", text); err == nil ||
		err.Error() != "--every-three 3s, --every-two 2s: the bound must be larger" {
		t.Errorf("rule error: %v", err)
	}
	if err := set.FieldError("Timing.Every", false, " 2s: use at least Timing.Bound", text); err == nil ||
		err.Error() != "--every-two 2s: use at least --every-three" {
		t.Errorf("field error: %v", err)
	}
	if set.FieldError("Elsewhere", false, "", text) != nil {
		t.Error("a field without a flag got an error")
	}
}

// TestHelpSuffix: --help names each flag's variables; a secret from the
// environment or its _FILE shows "(set)", never the value (issue 36: `run
// --help` printed the database URL and the SASL password). kong prints
// the kind and the default.
func TestHelpSuffix(t *testing.T) {
	file := filepath.Join(t.TempDir(), "url")
	if err := os.WriteFile(file, []byte("postgres://u:FileSecret@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("T_DATABASE_URL_FILE", file)
	t.Setenv("T_PASSWORD", "EnvSecret")
	t.Setenv("T_USER", "alice")
	ctx, env, err := parseTest(t)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for _, f := range ctx.Flags() {
		out.WriteString("--" + f.Name + env.HelpSuffix(f) + "\n")
	}
	usage := out.String()
	for _, secret := range []string{"FileSecret", "EnvSecret", "postgres://"} {
		if strings.Contains(usage, secret) {
			t.Errorf("usage shows %q:\n%s", secret, usage)
		}
	}
	for _, want := range []string{
		"--database-url (env T_DATABASE_URL or T_DATABASE_URL_FILE) (set)\n",
		"--password (env T_PASSWORD or T_PASSWORD_FILE) (set)\n",
		"--token (env T_TOKEN or T_TOKEN_FILE)\n",
		"--max-bytes (env T_MAX_BYTES)\n",
		"--failover (env T_FAILOVER)\n",
		"--help\n",
	} {
		if !strings.Contains(usage, want) {
			t.Errorf("usage lacks %q:\n%s", want, usage)
		}
	}
}
