package benchkit

import (
	"math"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {999, "999"}, {1000, "1,000"}, {1234567.6, "1,234,568"}, {-25000, "-25,000"}, {math.NaN(), "–"}, {math.Inf(1), "–"},
	} {
		if got := Num(c.v); got != c.want {
			t.Errorf("Num(%v) = %q, want %q", c.v, got, c.want)
		}
	}
	if F1(2.25) != "2.2" || F1(40) != "40.0" || F1(math.Inf(-1)) != "–" {
		t.Errorf("F1: %q %q %q", F1(2.25), F1(40), F1(math.Inf(-1)))
	}
	if F2(9) != "9.00" || F2(0.125) != "0.12" || F2(math.NaN()) != "–" {
		t.Errorf("F2: %q %q %q", F2(9), F2(0.125), F2(math.NaN()))
	}
	if MiB(40<<20) != 40 || MiB(1<<19) != 0.5 {
		t.Errorf("MiB: %v %v", MiB(40<<20), MiB(1<<19))
	}
	if JoinInts([]int{2, 6}) != "2,6" || JoinInts(nil) != "" {
		t.Errorf("JoinInts: %q", JoinInts([]int{2, 6}))
	}
}
