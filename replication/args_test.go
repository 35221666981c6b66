package replication

import (
	"strings"
	"testing"
)

// TestPluginArgsQuoting: the publication name reaches the server as
// exactly one identifier, whatever it holds (issue 36, row 10: it was put
// between single quotes as it was, so a quote ended the literal and a
// comma made two publications). The test undoes the two quotings the
// way the server reads them: the literal, then SplitIdentifierString.
func TestPluginArgsQuoting(t *testing.T) {
	for _, name := range []string{"outbox_relay", "MyPub", `we"ird`, "it's", "a,b", `x', messages 'false`, "", "ünï"} {
		args := PluginArgs(name)
		opt, ok := strings.CutPrefix(args[1], "publication_names ")
		if !ok {
			t.Fatalf("%q: %q", name, args)
		}
		lit, ok := unquoteLiteral(opt)
		if !ok {
			t.Errorf("%q: %s is not one string literal", name, opt)
			continue
		}
		ids, ok := splitIdentifiers(lit)
		if !ok || len(ids) != 1 || ids[0] != name {
			t.Errorf("%q: the server would read %q (%v)", name, ids, ok)
		}
	}
}

// unquoteLiteral reads one standard-conforming string literal that is
// the whole of s.
func unquoteLiteral(s string) (string, bool) {
	if len(s) < 2 || s[0] != '\'' || s[len(s)-1] != '\'' {
		return "", false
	}
	body := s[1 : len(s)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if body[i] == '\'' {
			if i+1 >= len(body) || body[i+1] != '\'' {
				return "", false // the literal ended early
			}
			i++
		}
		b.WriteByte(body[i])
	}
	return b.String(), true
}

// splitIdentifiers is SplitIdentifierString for quoted identifiers (an
// unquoted one would be folded to lower case; PluginArgs quotes all).
func splitIdentifiers(s string) ([]string, bool) {
	var out []string
	for {
		if len(s) == 0 || s[0] != '"' {
			return out, false
		}
		var b strings.Builder
		i := 1
		for ; i < len(s); i++ {
			if s[i] == '"' {
				if i+1 < len(s) && s[i+1] == '"' {
					b.WriteByte('"')
					i++
					continue
				}
				break
			}
			b.WriteByte(s[i])
		}
		if i >= len(s) {
			return out, false
		}
		out = append(out, b.String())
		s = s[i+1:]
		if s == "" {
			return out, true
		}
		if s[0] != ',' {
			return out, false
		}
		s = s[1:]
	}
}
