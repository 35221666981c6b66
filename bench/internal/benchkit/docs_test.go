package benchkit

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSection(t *testing.T) {
	s := Section{Start: "<!-- s -->", End: "<!-- e -->"}
	if got := s.Wrap("\nbody\n\n"); got != "<!-- s -->\n\nbody\n\n<!-- e -->" {
		t.Fatalf("Wrap = %q", got)
	}
	for _, c := range []struct{ name, doc, in, replaced string }{
		{"empty", "", "", "# Benchmarks\n\nNEW\n"},
		{"no markers", "# T\n\ntext\n\n\n", "", "# T\n\ntext\n\nNEW\n"},
		{"section", "# T\n<!-- s -->\nold\n<!-- e -->\ntail\n", "<!-- s -->\nold\n<!-- e -->", "# T\nNEW\ntail\n"},
		{"start alone", "# T\n<!-- s -->\n", "", "# T\n<!-- s -->\n\nNEW\n"},
		{"end alone", "# T\n<!-- e -->\n", "", "# T\n<!-- e -->\n\nNEW\n"},
		{"end before start", "<!-- e -->\n<!-- s -->\n", "", "<!-- e -->\n<!-- s -->\n\nNEW\n"},
	} {
		if got := s.In(c.doc); got != c.in {
			t.Errorf("%s: In = %q, want %q", c.name, got, c.in)
		}
		if got := s.Replace(c.doc, "NEW"); got != c.replaced {
			t.Errorf("%s: Replace = %q, want %q", c.name, got, c.replaced)
		}
	}
	// The two sections of docs/benchmarks.md are told apart.
	doc := OutboxSection.Wrap("relay") + "\n\n" + InboxSection.Wrap("inbox")
	if !strings.Contains(OutboxSection.In(doc), "relay") || strings.Contains(OutboxSection.In(doc), "inbox") ||
		!strings.Contains(InboxSection.In(doc), "inbox") || strings.Contains(InboxSection.In(doc), "relay") {
		t.Fatalf("sections of %q", doc)
	}
}

func TestUpdateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	var seen []string
	edit := func(text string) func(string) (string, error) {
		return func(doc string) (string, error) {
			seen = append(seen, doc)
			return doc + text, nil
		}
	}
	if err := UpdateFile(path, edit("a")); err != nil {
		t.Fatal(err)
	}
	if err := UpdateFile(path, edit("b")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "ab" || seen[0] != "" || seen[1] != "a" {
		t.Fatalf("file %q, edits saw %q", got, seen)
	}
	bad := errors.New("bad")
	if err := UpdateFile(path, func(string) (string, error) { return "c", bad }); !errors.Is(err, bad) {
		t.Fatalf("err = %v", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "ab" {
		t.Fatalf("file %q after a failed edit", got)
	}
	if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("temporary file left: %v", err)
	}
}
