package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/config"
)

// everyCommand lists every command that takes flags, from the command
// tree: a new command or verb is walked without editing the tests.
func everyCommand(t *testing.T) []string {
	t.Helper()
	var cmds []string
	for _, c := range usageCommands(t) {
		if c.args != "version" {
			cmds = append(cmds, c.args)
		}
	}
	return cmds
}

// TestEveryFlagHasAnEnvFallback: "every flag has an OUTBOX_RELAY_*
// environment fallback" (the usage and docs/configuration.md say so), and
// every credential can come from a file (<ENV>_FILE), so it need be
// neither in the environment nor on the command line, visible in ps.
func TestEveryFlagHasAnEnvFallback(t *testing.T) {
	sweep(t)
	credential := regexp.MustCompile(`password|database-url|secret|token`)
	n := 0
	for _, cmd := range everyCommand(t) {
		helpOf(t, "migrate")
		_, flags := docOf(t, cmd)
		if len(flags) == 0 {
			t.Errorf("%s --help lists no flags", cmd)
		}
		for _, f := range flags {
			n++
			want := "`" + config.EnvPrefix + strings.ToUpper(strings.ReplaceAll(f.name, "-", "_")) + "`"
			if !strings.HasPrefix(f.env, want) {
				t.Errorf("%s --%s: environment fallback %q, want %s", cmd, f.name, f.env, want)
			}
			// --kafka-sasl-oauth-token-endpoint is a URL, not a credential.
			if credential.MatchString(f.name) && !strings.HasSuffix(f.name, "-endpoint") && !strings.Contains(f.env, "_FILE`") {
				t.Errorf("%s --%s is a credential without a _FILE variable (env %s)", cmd, f.name, f.env)
			}
		}
	}
	if n < 100 {
		t.Fatalf("walked only %d flags: is the usage parsed?", n)
	}
}
