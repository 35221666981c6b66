package replay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
)

func TestRangeValidate(t *testing.T) {
	for _, r := range []Range{{All: true}, {FromCheckpoint: true}, {FromLSN: "0/1", ToLSN: "0/2"}, {Since: "x"}} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, r := range []Range{{}, {ToLSN: "0/2"}, {All: true, FromCheckpoint: true}, {FromLSN: "0/1", Since: "x"}} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "exactly one of --from-lsn, --from-checkpoint, --since or --all") {
			t.Errorf("%+v: %v", r, err)
		}
	}
}

// history is a checkpoint history of fixed answers; it records the
// positions asked for.
type history struct {
	latest       checkpoint.Checkpoint
	latestErr    error
	before       *checkpoint.Fence // FenceBefore and FenceBeforeTime
	after        *checkpoint.Fence
	askedLSN     []pglogrepl.LSN
	askedTime    time.Time
	askedByIdent checkpoint.Identity
}

func (h *history) Latest(context.Context) (checkpoint.Checkpoint, error) {
	return h.latest, h.latestErr
}

func (h *history) FenceBefore(_ context.Context, id checkpoint.Identity, lsn pglogrepl.LSN) (checkpoint.Fence, bool, error) {
	h.askedLSN, h.askedByIdent = append(h.askedLSN, lsn), id
	return fence(h.before)
}

func (h *history) FenceAfter(_ context.Context, _ checkpoint.Identity, lsn pglogrepl.LSN) (checkpoint.Fence, bool, error) {
	h.askedLSN = append(h.askedLSN, lsn)
	return fence(h.after)
}

func (h *history) FenceBeforeTime(_ context.Context, id checkpoint.Identity, t time.Time) (checkpoint.Fence, bool, error) {
	h.askedTime, h.askedByIdent = t, id
	return fence(h.before)
}

func fence(f *checkpoint.Fence) (checkpoint.Fence, bool, error) {
	if f == nil {
		return checkpoint.Fence{}, false, nil
	}
	return *f, true, nil
}

var (
	server = checkpoint.Identity{SystemID: "7300000000000000001", Timeline: 1}
	at     = time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC)
	fence1 = &checkpoint.Fence{LSN: 0x1000, Xmin: 700, Xmax: 705, At: at.Add(-time.Minute)}
	fence2 = &checkpoint.Fence{LSN: 0x3000, Xmin: 900, Xmax: 910, At: at.Add(time.Hour)}
)

func newMapper(h *history, commitTS bool) (mapper, *int) {
	calls := 0
	return mapper{history: h, slot: "outbox_relay", commitTS: commitTS,
		identify: func(context.Context) (checkpoint.Identity, error) { calls++; return server, nil }}, &calls
}

func TestWindowAll(t *testing.T) {
	m, calls := newMapper(&history{}, false)
	w, desc, err := m.selection(context.Background(), Range{All: true})
	if err != nil || desc != "every row in the table" || w.FromXid != nil || w.ToXid != nil {
		t.Fatalf("%+v %q %v", w, desc, err)
	}
	if *calls != 0 {
		t.Errorf("--all identified the server (needs no replication connection)")
	}
}

func TestWindowFromCheckpoint(t *testing.T) {
	h := &history{latest: checkpoint.Checkpoint{LSN: 0x2000, Identity: server, Fence: fence1}}
	m, _ := newMapper(h, false)
	w, desc, err := m.selection(context.Background(), Range{FromCheckpoint: true})
	if err != nil || *w.FromXid != 700 || desc != "from checkpoint 0/2000 (xid >= 700, fence at 0/1000)" {
		t.Fatalf("%+v %q %v", w, desc, err)
	}
	// A checkpoint of another cluster does not describe this one's rows.
	h.latest.Identity.Timeline = 2
	var mismatch *checkpoint.MismatchError
	if _, _, err := m.selection(context.Background(), Range{FromCheckpoint: true}); !errors.As(err, &mismatch) {
		t.Errorf("other timeline: %v", err)
	}
	h.latest = checkpoint.Checkpoint{LSN: 0x2000, Identity: server}
	if _, _, err := m.selection(context.Background(), Range{FromCheckpoint: true}); err == nil || !strings.Contains(err.Error(), "has no fence yet") {
		t.Errorf("no fence: %v", err)
	}
	h.latestErr = checkpoint.ErrCheckpointNotFound
	if _, _, err := m.selection(context.Background(), Range{FromCheckpoint: true}); !errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		t.Errorf("no checkpoint: %v", err)
	}
}

func TestWindowFromLSN(t *testing.T) {
	h := &history{before: fence1, after: fence2}
	m, _ := newMapper(h, false)
	w, desc, err := m.selection(context.Background(), Range{FromLSN: "0/1800", ToLSN: "0/2800"})
	if err != nil {
		t.Fatal(err)
	}
	if *w.FromXid != 700 || *w.ToXid != 910 || h.askedByIdent != server {
		t.Errorf("selection %+v, identity %v", w, h.askedByIdent)
	}
	if want := "from LSN 0/1800 (xid >= 700, fence at 0/1000), to LSN 0/2800 (xid < 910, fence at 0/3000)"; desc != want {
		t.Errorf("desc %q, want %q", desc, want)
	}
	if len(h.askedLSN) != 2 || h.askedLSN[0] != 0x1800 || h.askedLSN[1] != 0x2800 {
		t.Errorf("asked %v", h.askedLSN)
	}

	// Past the history's end: up to now.
	h.after = nil
	w, desc, err = m.selection(context.Background(), Range{FromLSN: "0/1800", ToLSN: "0/9000"})
	if err != nil || w.ToXid != nil || !strings.HasSuffix(desc, ", to LSN 0/9000 (past the checkpoint history: up to now)") {
		t.Errorf("%+v %q %v", w, desc, err)
	}
	// Before the history's start: refused, --all is the way.
	h.before = nil
	if _, _, err := m.selection(context.Background(), Range{FromLSN: "0/1800"}); err == nil ||
		!strings.Contains(err.Error(), `the checkpoint history of slot "outbox_relay" (system 7300000000000000001 timeline 1) has no position at or before 0/1800`) {
		t.Errorf("before the history: %v", err)
	}
}

func TestWindowSince(t *testing.T) {
	h := &history{before: fence1}
	m, _ := newMapper(h, true)
	w, desc, err := m.selection(context.Background(), Range{Since: "2026-12-02T18:00:00Z"})
	if err != nil || *w.FromXid != 700 || !w.Since.Equal(at) || !h.askedTime.Equal(at) {
		t.Fatalf("%+v %v", w, err)
	}
	if want := "since 2026-12-02T18:00:00Z (xid >= 700, fence at 2026-12-02T17:59:00Z), commit_ts >= since"; desc != want {
		t.Errorf("desc %q, want %q", desc, want)
	}
	// Without a fence, commit timestamps alone bound the rows.
	h.before = nil
	w, desc, err = m.selection(context.Background(), Range{Since: "2026-12-02T18:00:00Z"})
	if err != nil || w.FromXid != nil || desc != "since 2026-12-02T18:00:00Z (commit timestamps), commit_ts >= since" {
		t.Errorf("%+v %q %v", w, desc, err)
	}
	// Without either, rows committed since cannot be told apart.
	m.commitTS = false
	if _, _, err := m.selection(context.Background(), Range{Since: "2026-12-02T18:00:00Z"}); err == nil ||
		!strings.Contains(err.Error(), "track_commit_timestamp is off") {
		t.Errorf("no fence, no commit timestamps: %v", err)
	}
}

func TestWindowMalformedValuesAreConfigErrors(t *testing.T) {
	m, _ := newMapper(&history{before: fence1}, false)
	for _, tc := range []struct {
		r    Range
		want string
	}{
		{Range{FromLSN: "12"}, `--from-lsn "12": `},
		{Range{FromLSN: "0/1", ToLSN: "x/y/z"}, `--to-lsn "x/y/z": `},
		{Range{Since: "yesterday"}, `--since "yesterday": use RFC 3339, e.g. 2026-12-02T18:00:00Z`},
	} {
		_, _, err := m.selection(context.Background(), tc.r)
		var ce *configerr.Error
		if !errors.As(err, &ce) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a *configerr.Error %q", tc.r, err, tc.want)
		}
	}
}
