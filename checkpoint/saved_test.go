package checkpoint

import (
	"errors"
	"strings"
	"testing"
)

// A checkpoint's LSN names WAL of one cluster and timeline only: any
// other identity is refused, and the error says which part differs.
func TestVerify(t *testing.T) {
	here := Identity{SystemID: "7300000000000000001", Timeline: 2}
	cp := Checkpoint{Slot: "outbox_relay", LSN: 0x1000, Identity: here}
	if err := cp.Verify(here); err != nil {
		t.Fatalf("Verify on its own identity: %v", err)
	}
	cases := []struct {
		name    string
		current Identity
		what    string
	}{
		{"another cluster", Identity{SystemID: "7300000000000000009", Timeline: 2}, "another system identifier"},
		{"promoted standby", Identity{SystemID: here.SystemID, Timeline: 3}, "another timeline"},
		{"older timeline", Identity{SystemID: here.SystemID, Timeline: 1}, "another timeline"},
		{"both differ", Identity{SystemID: "1", Timeline: 1}, "another system identifier"},
		{"unknown", Identity{}, "another system identifier"},
	}
	for _, c := range cases {
		err := cp.Verify(c.current)
		var me *MismatchError
		if !errors.As(err, &me) {
			t.Errorf("%s: Verify = %v, want a *MismatchError", c.name, err)
			continue
		}
		if me.Slot != "outbox_relay" || me.Saved != here || me.Current != c.current {
			t.Errorf("%s: %+v", c.name, me)
		}
		msg := err.Error()
		for _, want := range []string{`slot "outbox_relay"`, here.String(), c.current.String(), c.what, "recover --since", "checkpoint reset"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q lacks %q", c.name, msg, want)
			}
		}
	}
}

func TestIdentityString(t *testing.T) {
	if s := (Identity{SystemID: "7300000000000000001", Timeline: 4}).String(); s != "system 7300000000000000001 timeline 4" {
		t.Fatalf("String = %q", s)
	}
}

func TestAheadError(t *testing.T) {
	err := error(&AheadError{Slot: "s1", LSN: 0x2000, WAL: 0x1000})
	for _, want := range []string{`slot "s1"`, "0/2000", "0/1000", "checkpoint reset"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
