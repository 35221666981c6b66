package poison

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for in, want := range map[string]Policy{"": Quarantine, "quarantine": Quarantine, "halt": Halt} {
		if got, err := ParsePolicy(in); err != nil || got != want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"wait", "Halt", "skip"} {
		if _, err := ParsePolicy(in); err == nil || !strings.Contains(err.Error(), "use quarantine or halt") {
			t.Errorf("ParsePolicy(%q) = %v, want an error naming the policies", in, err)
		}
	}
}

func TestPermanent(t *testing.T) {
	base := errors.New("no such column")
	p := Permanent(base)
	if !IsPermanent(p) || !IsPermanent(fmt.Errorf("apply: %w", p)) || !errors.Is(p, base) || p.Error() != base.Error() {
		t.Fatalf("Permanent(%v) = %v: must be permanent through wrapping, wrap its cause and keep its text", base, p)
	}
	if IsPermanent(base) || Permanent(nil) != nil {
		t.Fatal("an unmarked error is not permanent, and Permanent(nil) is nil")
	}
	h := &HaltError{EventID: "e1", AggregateID: "a1", Reason: "record too large", Held: "the slot position"}
	if !IsPermanent(fmt.Errorf("stream: %w", h)) {
		t.Fatal("a HaltError is permanent")
	}
	for _, s := range []string{"e1", "a1", "record too large", "the slot position held", "quarantine"} {
		if !strings.Contains(h.Error(), s) {
			t.Errorf("%q lacks %q", h.Error(), s)
		}
	}
}
