package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// History is the ancestry of a server's timeline, as its timeline history
// file tells it: the earlier timelines it descends from and the WAL
// position where each of them ended. WAL before that position is the same
// on the ancestor and on every timeline that descends from it, so an LSN
// saved there names the same WAL here; WAL after it is not (a promoted
// standby did not receive it, or a point-in-time restore discarded it).
type History struct {
	// Timeline is the timeline the history belongs to (the server's).
	Timeline int32
	// Switches are the ancestors, oldest first; none on timeline 1.
	Switches []Switch
}

// Switch is one line of a timeline history file: where an ancestor
// timeline ended and the next one on the way to History.Timeline began.
type Switch struct {
	// Timeline is the ancestor that ended.
	Timeline int32
	// End is the switch point: the first position of the next timeline,
	// the end of the last WAL record the two timelines share.
	End pglogrepl.LSN
	// Reason is PostgreSQL's free-text reason (e.g. "no recovery target
	// specified" for a promotion).
	Reason string
}

// ReadHistory reads the history of timeline on a replication connection
// (TIMELINE_HISTORY). Timeline 1 has no history file and no ancestors.
func ReadHistory(ctx context.Context, conn *pgconn.PgConn, timeline int32) (History, error) {
	if timeline == 1 {
		return History{Timeline: 1}, nil
	}
	r, err := pglogrepl.TimelineHistory(ctx, conn, timeline)
	if err != nil {
		return History{}, fmt.Errorf("TIMELINE_HISTORY %d: %w", timeline, err)
	}
	h, err := ParseHistory(timeline, r.Content)
	if err != nil {
		return History{}, fmt.Errorf("TIMELINE_HISTORY %d (%s): %w", timeline, r.FileName, err)
	}
	return h, nil
}

// ParseHistory parses the content of timeline's history file. Like
// PostgreSQL (readTimeLineHistory), it skips blank lines and lines
// starting with '#', and takes each other line as the ancestor's
// timeline, a tab, its switch point (X/X), and an optional tab and
// reason. Ancestors must increase and stay below timeline (PostgreSQL
// checks the same): anything else is not a history it wrote, so it is an
// error rather than a guess.
func ParseHistory(timeline int32, content []byte) (History, error) {
	if timeline < 1 {
		return History{}, fmt.Errorf("history of timeline %d: invalid timeline", timeline)
	}
	h := History{Timeline: timeline}
	for n, line := range bytes.Split(content, []byte("\n")) {
		s := strings.TrimSpace(string(line))
		if s == "" || s[0] == '#' {
			continue
		}
		sw, err := parseSwitch(s)
		switch {
		case err != nil:
		case sw.Timeline >= timeline:
			err = fmt.Errorf("ancestor timeline %d is not below %d", sw.Timeline, timeline)
		case len(h.Switches) > 0 && sw.Timeline <= h.Switches[len(h.Switches)-1].Timeline:
			err = fmt.Errorf("timeline %d does not follow timeline %d (timelines must increase)", sw.Timeline, h.Switches[len(h.Switches)-1].Timeline)
		}
		if err != nil {
			return History{}, fmt.Errorf("history of timeline %d, line %d %q: %w", timeline, n+1, s, err)
		}
		h.Switches = append(h.Switches, sw)
	}
	return h, nil
}

// parseSwitch parses "TLI\tX/X[\treason]".
func parseSwitch(s string) (Switch, error) {
	tli, rest, ok := strings.Cut(s, "\t")
	if !ok {
		return Switch{}, fmt.Errorf("want a timeline, a tab and a switch point")
	}
	t, err := strconv.ParseUint(tli, 10, 32)
	if err != nil || t == 0 || t > math.MaxInt32 {
		return Switch{}, fmt.Errorf("invalid timeline %q", tli)
	}
	at, reason, _ := strings.Cut(rest, "\t")
	end, err := parseLSN(at)
	if err != nil {
		return Switch{}, err
	}
	return Switch{Timeline: int32(t), End: end, Reason: strings.TrimSpace(reason)}, nil
}

// parseLSN parses X/X strictly: pglogrepl.ParseLSN accepts trailing text.
func parseLSN(s string) (pglogrepl.LSN, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if ok {
		h, herr := strconv.ParseUint(hi, 16, 32)
		l, lerr := strconv.ParseUint(lo, 16, 32)
		if herr == nil && lerr == nil {
			return pglogrepl.LSN(h<<32 | l), nil
		}
	}
	return 0, fmt.Errorf("invalid switch point %q (want X/X)", s)
}

// End returns how far the WAL of timeline is also the WAL of h.Timeline;
// ok is false unless timeline is one of h.Timeline's ancestors. That is
// where timeline ended, unless a later ancestor ended before it (a
// point-in-time recovery that stopped before its target timeline began):
// the shared WAL is the shortest of the ends on the way.
func (h History) End(timeline int32) (end pglogrepl.LSN, ok bool) {
	for _, sw := range h.Switches {
		switch {
		case sw.Timeline == timeline:
			end, ok = sw.End, true
		case ok:
			end = min(end, sw.End)
		}
	}
	return end, ok
}

// Shares reports whether position lsn of timeline names the same WAL on
// h.Timeline: it is h.Timeline itself, or an ancestor whose shared WAL
// (End) reaches lsn. A checkpoint's LSN is a TransactionEndLSN, so at the switch
// point itself the transaction is complete on both timelines.
func (h History) Shares(timeline int32, lsn pglogrepl.LSN) bool {
	if timeline == h.Timeline {
		return true
	}
	end, ok := h.End(timeline)
	return ok && lsn <= end
}
