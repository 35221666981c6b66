package envflag

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

const errSize = "not a size: use a value like 16MiB, 50GB, 900KiB or a byte count"

// sizeUnits are the byte units ParseSize takes: SI (powers of 1000) and
// IEC (powers of 1024), as PostgreSQL and Kafka settings are written.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}

// ParseSize parses a byte count: a plain integer, or a number with a unit
// (case-insensitive, optionally after a space): 16MiB, 50GB, 1.5GiB.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' && r != '-' })
	if i < 0 {
		i = len(t)
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	mult, ok := sizeUnits[unit]
	if !ok || num == "" {
		return 0, errors.New(errSize)
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		if n != 0 && (n > math.MaxInt64/mult || n < math.MinInt64/mult) {
			return 0, errors.New(errSize)
		}
		return n * mult, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || unit == "" || unit == "b" || math.Abs(f*float64(mult)) >= math.MaxInt64 {
		return 0, errors.New(errSize)
	}
	return int64(math.Round(f * float64(mult))), nil
}

// FormatSize writes n in the largest IEC unit that divides it exactly
// (67108864 is 64MiB), so defaults read as people write them and parse
// back to the same count.
func FormatSize(n int64) string {
	for _, u := range []struct {
		name string
		mult int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.mult == 0 {
			return strconv.FormatInt(n/u.mult, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}
