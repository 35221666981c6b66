package benchkit

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Num formats v rounded to a whole number with thousands separators
// ("1,234,567"), or "–" for NaN and infinities.
func Num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	neg := v < 0
	if neg {
		v = -v
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// F1 formats v with one decimal, or "–" for NaN and infinities.
func F1(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// F2 formats v with two decimals, or "–" for NaN and infinities.
func F2(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// MiB is b bytes in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// JoinInts is v comma-separated, the way the commands' list flags take
// it ("1,10").
func JoinInts(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
