package envflag

// Closest returns the candidate nearest to name, for a "did you mean"
// hint: the one with the smallest edit distance (Distance), the
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
		d := Distance(name, c)
		if d < bestDist || d == bestDist && best != "" && c < best {
			best, bestDist = c, d
		}
	}
	return best
}

// Distance is the Damerau-Levenshtein distance of a and b in its optimal
// string alignment form: the fewest insertions, deletions, substitutions
// and swaps of two adjacent characters that turn a into b, no substring
// edited twice. A typed name's usual slips (EVNTS, BRKOERS, LOGLEVEL) are
// one edit each.
func Distance(a, b string) int {
	s, t := []rune(a), []rune(b)
	// prev2, prev and cur are rows i-2, i-1 and i of the distance matrix:
	// row i, column j is the distance of s[:i] and t[:j].
	prev2, prev, cur := make([]int, len(t)+1), make([]int, len(t)+1), make([]int, len(t)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(s); i++ {
		cur[0] = i
		for j := 1; j <= len(t); j++ {
			cost := 1
			if s[i-1] == t[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && s[i-1] == t[j-2] && s[i-2] == t[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(t)]
}
