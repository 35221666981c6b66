package envflag

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"time"
)

const errDuration = "not a duration: use a value like 500ms, 10s, 1m, 12h or 7d"

// ParseDuration is time.ParseDuration that also takes days, the unit
// retention periods are thought in: "7d", "1.5d", "1d12h". A day is 24
// hours (no calendar or daylight-saving arithmetic).
func ParseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	if neg || strings.HasPrefix(t, "+") {
		t = t[1:]
	}
	var days time.Duration
	if i := strings.IndexByte(t, 'd'); i > 0 {
		n, err := strconv.ParseFloat(t[:i], 64)
		// Past about 106,751 days a Duration overflows: refuse rather
		// than wrap ("1e300d").
		if err != nil || n < 0 || n*float64(24*time.Hour) >= math.MaxInt64 {
			return 0, errors.New(errDuration)
		}
		days = time.Duration(n * float64(24*time.Hour))
		if t = t[i+1:]; t == "" {
			t = "0"
		}
	}
	d, err := time.ParseDuration(t)
	if err != nil || strings.HasPrefix(t, "-") || strings.HasPrefix(t, "+") {
		return 0, errors.New(errDuration)
	}
	if d > math.MaxInt64-days {
		return 0, errors.New(errDuration)
	}
	if d += days; neg {
		d = -d
	}
	return d, nil
}
