package envflag

import (
	"slices"
	"testing"

	"github.com/alecthomas/kong"
)

// TestNormalizeFlagPositionOnly: a single-dash long flag becomes a
// double-dash one, but the value of a flag that takes one is kept as
// given, even when it begins with "-", and nothing after "--" is touched
// (issue 46: --kafka-sasl-password -Xy7secret sent "--Xy7secret").
func TestNormalizeFlagPositionOnly(t *testing.T) {
	var g struct {
		T testCmd `cmd:""`
	}
	k, err := kong.New(&g, append(Options(), kong.Exit(func(int) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	takes := ValueFlags(k.Model)
	for _, c := range []struct{ in, want []string }{
		{[]string{"t", "-name", "x", "-on"}, []string{"t", "--name", "x", "--on"}},
		{[]string{"t", "--password", "-Xy7secret"}, []string{"t", "--password", "-Xy7secret"}},
		{[]string{"t", "-password", "-Xy7secret", "-user", "-u"}, []string{"t", "--password", "-Xy7secret", "--user", "-u"}},
		{[]string{"t", "-password=-Xy7", "-user", "--x"}, []string{"t", "--password=-Xy7", "--user", "--x"}},
		{[]string{"t", "-standby-url", "-a", "-standby-url", "-b"}, []string{"t", "--standby-url", "-a", "--standby-url", "-b"}},
		// A bool flag takes no next argument: what follows is a flag.
		{[]string{"t", "-on", "-user", "-u"}, []string{"t", "--on", "--user", "-u"}},
		{[]string{"t", "-failover", "-name", "-n"}, []string{"t", "--failover", "--name", "-n"}},
		{[]string{"t", "--count", "-1", "-every", "-1s"}, []string{"t", "--count", "-1", "--every", "-1s"}},
		{[]string{"t", "-help"}, []string{"t", "--help"}},
		{[]string{"t", "--", "-name", "-x"}, []string{"t", "--", "-name", "-x"}},
		{[]string{"t", "--name", "--", "-on"}, []string{"t", "--name", "--", "--on"}},
		// An unknown flag: the next argument is in flag position (kong
		// refuses the unknown flag first).
		{[]string{"t", "-nope", "-on"}, []string{"t", "--nope", "--on"}},
		{[]string{"t", "--name"}, []string{"t", "--name"}},
	} {
		if got := Normalize(c.in, takes); !slices.Equal(got, c.want) {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"t", "-password", "-Xy7secret"}, "-Xy7secret"},
		{[]string{"t", "--password", "-Xy7secret"}, "-Xy7secret"},
		{[]string{"t", "-password", "--"}, "--"},
	} {
		g.T = testCmd{}
		if _, err := k.Parse(Normalize(c.args, takes)); err != nil || g.T.Password != c.want {
			t.Errorf("%q: password %q, %v; want %q", c.args, g.T.Password, err, c.want)
		}
	}
}
