package checkpoint

import (
	"fmt"
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
		// Ordinals 0-2 and 5 saved; the restarted tracker acknowledged 3
		// (it skipped 0-2 and 5, so its own prefix is empty) and 7.
		{"union with what was acknowledged past the prefix", Partial{CommitLSN: 150, Events: 3, Acked: []byte{0b100}}, 100,
			Partial{CommitLSN: 150, Events: 0, Acked: []byte{0b1000_1000}}, Partial{CommitLSN: 150, Events: 4, Acked: []byte{0b1010}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Saver{partial: c.saved}
			if got := s.partialAt(c.lsn, c.cur); !got.Equal(c.want) {
				t.Fatalf("partialAt(%d, %+v) with %+v saved = %+v, want %+v", c.lsn, c.cur, c.saved, got, c.want)
			}
		})
	}
}

func TestPartialHasUnion(t *testing.T) {
	p := Partial{CommitLSN: 9, Events: 2, Acked: []byte{0b1010, 0b1}} // 0, 1, 3, 5, 10
	var got []int
	for o := 0; o < 20; o++ {
		if p.Has(o) {
			got = append(got, o)
		}
	}
	if fmt.Sprint(got) != "[0 1 3 5 10]" || p.Known() != 5 {
		t.Fatalf("Has: %v, Known %d", got, p.Known())
	}
	q := Partial{CommitLSN: 9, Events: 0, Acked: []byte{0b10000100}} // 2, 7
	u := p.Union(q)
	want := Partial{CommitLSN: 9, Events: 4, Acked: []byte{0b101000, 0}} // 0-3, 5, 7, 10
	for o := 0; o < 20; o++ {
		if u.Has(o) != (p.Has(o) || q.Has(o)) {
			t.Fatalf("union %+v: ordinal %d", u, o)
		}
	}
	if u.Events != 4 || u.Known() != 7 || !u.Equal(p.Union(q)) {
		t.Fatalf("union %+v, want %+v in effect", u, want)
	}
	if !(Partial{}).Union(q).Equal(q) || !p.Union(Partial{}).Equal(p) {
		t.Fatal("union with the empty Partial")
	}
}
