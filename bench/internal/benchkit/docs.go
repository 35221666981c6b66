package benchkit

import (
	"os"
	"strings"
)

// Section is a generated section of a Markdown file: the text from the
// Start marker line to the End marker line, which a bench rewrites on
// each run while the hand-written text around it stays.
type Section struct {
	Start, End string
}

// The generated sections of docs/benchmarks.md. Each command rewrites
// its own and keeps the other's.
var (
	// OutboxSection is outbox-bench's (make bench).
	OutboxSection = Section{
		Start: "<!-- BEGIN outbox-bench generated section: `make bench` rewrites everything down to the END marker -->",
		End:   "<!-- END outbox-bench generated section -->",
	}
	// InboxSection is inbox-bench's (make bench-inbox).
	InboxSection = Section{
		Start: "<!-- inbox-bench:start -->",
		End:   "<!-- inbox-bench:end -->",
	}
)

// Wrap is md between the markers, a blank line on either side: the
// section as it is written.
func (s Section) Wrap(md string) string {
	return s.Start + "\n\n" + strings.TrimSpace(md) + "\n\n" + s.End
}

// In is the section in doc, markers included, or "" when doc does not
// hold the Start marker followed by the End marker.
func (s Section) In(doc string) string {
	i, end, ok := s.bounds(doc)
	if !ok {
		return ""
	}
	return doc[i:end]
}

// bounds are where the section starts and ends in doc, markers included;
// ok is false when doc does not hold it.
func (s Section) bounds(doc string) (i, end int, ok bool) {
	i, j := strings.Index(doc, s.Start), strings.Index(doc, s.End)
	if i < 0 || j <= i {
		return 0, 0, false
	}
	return i, j + len(s.End), true
}

// Replace returns doc with text in place of the section, markers
// included, when doc holds the section (see In). Otherwise text is
// appended after a blank line, or starts a new "# Benchmarks" document
// when doc is empty.
func (s Section) Replace(doc, text string) string {
	if i, end, ok := s.bounds(doc); ok {
		return doc[:i] + text + doc[end:]
	}
	if doc == "" {
		return "# Benchmarks\n\n" + text + "\n"
	}
	return strings.TrimRight(doc, "\n") + "\n\n" + text + "\n"
}

// UpdateFile rewrites the file at path with what edit makes of its
// contents ("" for a file that does not exist yet), through a temporary
// file next to it that is renamed over it. An error from edit leaves the
// file as it is.
func UpdateFile(path string, edit func(doc string) (string, error)) error {
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc, err := edit(string(old))
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
