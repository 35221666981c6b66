package envflag

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds every flag of a kind shares, checked where the value is parsed,
// for the command line and the environment alike. A flag's own range (a
// positive interval, a port) is its configuration's Validate; these only
// keep out what no flag means, so a typo or an attack cannot reach the
// code that would allocate, sleep or loop on it.
const (
	// maxText is the longest string value: longer than any name, address,
	// path or template the flags take.
	maxText = 4096
	// maxSecretText is the longest secret or connection string: OAuth
	// client secrets and key=value connection strings run longer.
	maxSecretText = 16 << 10
	// maxInt is the largest integer magnitude: counts, partitions and
	// batch sizes; Kafka's own are int32.
	maxInt = math.MaxInt32
	// maxDuration is the longest duration: ten years is longer than any
	// interval, timeout or retention a relay has.
	maxDuration = 3650 * 24 * time.Hour
	// maxSize is the largest byte count: 1 PiB.
	maxSize = 1 << 50
)

// checkText refuses a string value no flag means: invalid UTF-8, a control
// character (a line break in a name forges log lines, a NUL cannot reach
// PostgreSQL), or a value longer than maxText. Secrets and connection
// strings may hold tabs and line breaks (a key=value connection string
// written over lines in a file) and be up to maxSecretText long.
func checkText(s string, secret bool) error {
	limit := maxText
	if secret {
		limit = maxSecretText
	}
	if len(s) > limit {
		return fmt.Errorf("too long: %d bytes, at most %d", len(s), limit)
	}
	if !utf8.ValidString(s) {
		return errors.New("not valid UTF-8")
	}
	for i, r := range s {
		if unicode.IsControl(r) && !(secret && (r == '\t' || r == '\n' || r == '\r')) {
			return fmt.Errorf("control character %U at byte %d", r, i)
		}
	}
	return nil
}
