package envflag

import edlib "github.com/hbollon/go-edlib"

// Closest returns the candidate nearest to name, for a "did you mean"
// hint: the one with the smallest edit distance (optimal string alignment: a letter added,
// left out or changed, or two adjacent letters swapped, is one edit), the
// alphabetically first of equals, provided the distance is at most a
// third of name's length (at least 1), so that a misspelling gets its
// name and an unrelated word gets nothing. It returns "" when no
// candidate is that close. Pass names without a prefix they all share
// ("MAX_BATCH", not "OUTBOX_RELAY_MAX_BATCH"): a long shared prefix would
// make unrelated names look close.
func Closest(name string, candidates []string) string {
	limit := max(1, len([]rune(name))/3)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		d := edlib.OSADamerauLevenshteinDistance(name, c)
		if d < bestDist || d == bestDist && best != "" && c < best {
			best, bestDist = c, d
		}
	}
	return best
}
