package backfill

import (
	"bytes"
	"testing"
	"time"
)

func TestPrintProgress(t *testing.T) {
	var b bytes.Buffer
	p := PrintProgress(&b, "replay")
	p(Stats{Total: 200, Acked: 50, Elapsed: 2 * time.Second})
	p(Stats{Elapsed: 1400 * time.Millisecond})
	want := "replay: 50/200 events acknowledged (25%), 25/s, 2s\nreplay: 0/0 events acknowledged (100%), 0/s, 1s\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
