package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/backfill"
	"github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/configerr"
)

// Range says where a replay starts and stops, as the operator wrote it.
// Exactly one start is set. Its errors name the binary's replay flags: that
// command is the only caller.
type Range struct {
	// FromLSN starts at a WAL position (X/Y form), FromCheckpoint at the
	// newest saved checkpoint, Since at a time (RFC 3339), All at the
	// table's first row.
	FromLSN        string
	FromCheckpoint bool
	Since          string
	All            bool
	// ToLSN, when set, stops at a WAL position (default: now).
	ToLSN string
}

// Validate checks that exactly one start is given.
func (r Range) Validate() error {
	starts := 0
	for _, b := range []bool{r.FromLSN != "", r.FromCheckpoint, r.Since != "", r.All} {
		if b {
			starts++
		}
	}
	if starts != 1 {
		return errors.New("replay needs exactly one of --from-lsn, --from-checkpoint, --since or --all")
	}
	return nil
}

// History is the checkpoint history positions are mapped through
// (*checkpoint.Store).
type History interface {
	Latest(ctx context.Context) (checkpoint.Checkpoint, error)
	FenceBefore(ctx context.Context, id checkpoint.Identity, lsn pglogrepl.LSN) (checkpoint.Fence, bool, error)
	FenceAfter(ctx context.Context, id checkpoint.Identity, lsn pglogrepl.LSN) (checkpoint.Fence, bool, error)
	FenceBeforeTime(ctx context.Context, id checkpoint.Identity, t time.Time) (checkpoint.Fence, bool, error)
}

// mapper maps a Range to outbox rows.
type mapper struct {
	history History
	// identify returns the server's identity: the history of another
	// system or timeline does not describe this one's rows.
	identify func(context.Context) (checkpoint.Identity, error)
	slot     string
	// commitTS says track_commit_timestamp is on.
	commitTS bool
}

// selection maps r to a backfill selection and describes the mapping for the
// operator.
func (m mapper) selection(ctx context.Context, r Range) (backfill.Selection, string, error) {
	var w backfill.Selection
	if r.All {
		return w, "every row in the table", nil
	}
	id, err := m.identify(ctx)
	if err != nil {
		return w, "", err
	}
	var desc string
	switch {
	case r.FromCheckpoint:
		desc, err = m.fromCheckpoint(ctx, id, &w)
	case r.FromLSN != "":
		desc, err = m.fromLSN(ctx, id, r.FromLSN, &w)
	case r.Since != "":
		desc, err = m.since(ctx, id, r.Since, &w)
	}
	if err != nil {
		return w, "", err
	}
	if r.ToLSN != "" {
		to, err := m.toLSN(ctx, id, r.ToLSN, &w)
		if err != nil {
			return w, "", err
		}
		desc += to
	}
	return w, desc, nil
}

func (m mapper) fromCheckpoint(ctx context.Context, id checkpoint.Identity, w *backfill.Selection) (string, error) {
	cp, err := m.history.Latest(ctx)
	if err != nil {
		return "", err
	}
	if err := cp.Verify(id); err != nil {
		return "", err
	}
	if cp.Fence == nil {
		return "", fmt.Errorf("checkpoint at %s has no fence yet (saved before the relay captured one): use --all", cp.LSN)
	}
	w.FromXid = &cp.Fence.Xmin
	return fmt.Sprintf("from checkpoint %s (xid >= %d, fence at %s)", cp.LSN, cp.Fence.Xmin, cp.Fence.LSN), nil
}

func (m mapper) fromLSN(ctx context.Context, id checkpoint.Identity, s string, w *backfill.Selection) (string, error) {
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return "", &configerr.Error{Err: fmt.Errorf("--from-lsn %q: %w (use the X/Y form)", s, err)}
	}
	fence, ok, err := m.history.FenceBefore(ctx, id, lsn)
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("the checkpoint history of slot %q (%s) has no position at or before %s: "+
			"it starts later or was pruned (--checkpoint-retention); use --all to replay every row still in the table", m.slot, id, lsn)
	}
	w.FromXid = &fence.Xmin
	return fmt.Sprintf("from LSN %s (xid >= %d, fence at %s)", lsn, fence.Xmin, fence.LSN), nil
}

func (m mapper) since(ctx context.Context, id checkpoint.Identity, s string, w *backfill.Selection) (string, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return "", &configerr.Error{Err: fmt.Errorf("--since %q: use RFC 3339, e.g. 2026-12-02T18:00:00Z", s)}
	}
	w.Since = t
	fence, ok, err := m.history.FenceBeforeTime(ctx, id, t)
	if err != nil {
		return "", err
	}
	var desc string
	switch {
	case ok:
		w.FromXid = &fence.Xmin
		desc = fmt.Sprintf("since %s (xid >= %d, fence at %s)", t.Format(time.RFC3339), fence.Xmin, fence.At.Format(time.RFC3339))
	case m.commitTS:
		desc = fmt.Sprintf("since %s (commit timestamps)", t.Format(time.RFC3339))
	default:
		return "", fmt.Errorf("the checkpoint history of slot %q has no position before %s and track_commit_timestamp is off, "+
			"so rows committed since cannot be told apart: use --all (or an LSN/time inside the history)", m.slot, t.Format(time.RFC3339))
	}
	if m.commitTS {
		desc += ", commit_ts >= since"
	}
	return desc, nil
}

func (m mapper) toLSN(ctx context.Context, id checkpoint.Identity, s string, w *backfill.Selection) (string, error) {
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return "", &configerr.Error{Err: fmt.Errorf("--to-lsn %q: %w (use the X/Y form)", s, err)}
	}
	fence, ok, err := m.history.FenceAfter(ctx, id, lsn)
	if err != nil {
		return "", err
	}
	if !ok {
		return fmt.Sprintf(", to LSN %s (past the checkpoint history: up to now)", lsn), nil
	}
	w.ToXid = &fence.Xmax
	return fmt.Sprintf(", to LSN %s (xid < %d, fence at %s)", lsn, fence.Xmax, fence.LSN), nil
}
