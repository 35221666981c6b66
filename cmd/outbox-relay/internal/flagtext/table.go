package flagtext

import (
	"cmp"
	"maps"
	"slices"
	"strings"
)

// Table maps configuration fields, by their Go paths in the libraries'
// configuration ("Publish.MaxBatchBytes"), to the flags that set them
// ("--max-batch-bytes"). It finds the fields a text names (Find) and
// renames them by their flags (Replace) with one scan: the longest path
// wins where paths overlap (Publish.MaxBatchBytes is not read as
// Publish.MaxBatch), and a path inside a longer word does not count.
type Table struct {
	flags map[string]string
	paths []string // longest first
}

// NewTable returns the table of flags (field path -> flag).
func NewTable(flags map[string]string) *Table {
	paths := slices.SortedFunc(maps.Keys(flags), func(x, y string) int {
		return cmp.Or(len(y)-len(x), strings.Compare(x, y))
	})
	return &Table{flags: flags, paths: paths}
}

// span is where text names path: text[start:end].
type span struct {
	start, end int
	path       string
}

// spans are the fields text names, in text order.
func (t *Table) spans(text string) []span {
	var out []span
	var taken []bool
	for _, p := range t.paths {
		for i := 0; i < len(text); {
			j := strings.Index(text[i:], p)
			if j < 0 {
				break
			}
			j += i
			end := j + len(p)
			i = end
			if (j > 0 && word(text[j-1])) || (end < len(text) && word(text[end])) {
				continue
			}
			if taken == nil {
				taken = make([]bool, len(text))
			}
			if slices.Contains(taken[j:end], true) {
				continue
			}
			for k := j; k < end; k++ {
				taken[k] = true
			}
			out = append(out, span{j, end, p})
		}
	}
	slices.SortFunc(out, func(a, b span) int { return a.start - b.start })
	return out
}

// Find returns the fields text names, with their flags; nil when it
// names none.
func (t *Table) Find(text string) map[string]string {
	var out map[string]string
	for _, s := range t.spans(text) {
		if out == nil {
			out = map[string]string{}
		}
		out[s.path] = t.flags[s.path]
	}
	return out
}

// Replace is text with each field it names renamed by its flag: "exceeds
// Publish.MaxBatchBytes" reads "exceeds --max-batch-bytes".
func (t *Table) Replace(text string) string {
	spans := t.spans(text)
	if len(spans) == 0 {
		return text
	}
	var b strings.Builder
	last := 0
	for _, s := range spans {
		b.WriteString(text[last:s.start])
		b.WriteString(t.flags[s.path])
		last = s.end
	}
	b.WriteString(text[last:])
	return b.String()
}

// word reports whether c continues a field path's word.
func word(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
