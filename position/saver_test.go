package position

import (
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestSaverPartialAt(t *testing.T) {
	p := func(lsn pglogrepl.LSN, n int) Partial { return Partial{CommitLSN: lsn, Events: n} }
	cases := []struct {
		name      string
		saved     Partial
		lsn       pglogrepl.LSN
		cur, want Partial
	}{
		{"none", Partial{}, 100, Partial{}, Partial{}},
		{"source's", Partial{}, 100, p(150, 5), p(150, 5)},
		{"grows", p(150, 5), 100, p(150, 9), p(150, 9)},
		{"a restart's tracker knows less of the same transaction", p(150, 9), 100, p(150, 4), p(150, 9)},
		{"kept while the source knows none", p(150, 9), 100, Partial{}, p(150, 9)},
		{"commit at the position: not confirmed yet", p(150, 9), 150, Partial{}, p(150, 9)},
		{"dropped once its transaction is confirmed", p(150, 9), 160, Partial{}, Partial{}},
		{"a newer transaction's replaces it", p(150, 9), 160, p(170, 2), p(170, 2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Saver{partial: c.saved}
			if got := s.partialAt(c.lsn, c.cur); got != c.want {
				t.Fatalf("partialAt(%d, %+v) with %+v saved = %+v, want %+v", c.lsn, c.cur, c.saved, got, c.want)
			}
		})
	}
}
