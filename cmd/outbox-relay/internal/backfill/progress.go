package backfill

import (
	"fmt"
	"io"
	"time"
)

// PrintProgress returns a Runner.Progress that prints one line per call
// to w, prefixed with what ("replay", "recover"): operators watch long
// back-fills on the terminal.
func PrintProgress(w io.Writer, what string) func(Stats) {
	return func(s Stats) {
		pct := 100.0
		if s.Total > 0 {
			pct = 100 * float64(s.Acked) / float64(s.Total)
		}
		fmt.Fprintf(w, "%s: %d/%d events acknowledged (%.0f%%), %.0f/s, %s\n", what, s.Acked, s.Total, pct, s.Rate(), s.Elapsed.Round(time.Second))
	}
}
