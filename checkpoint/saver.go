package checkpoint

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
)

// maxFences bounds the fences a Saver holds while the relay lags behind
// the WAL. When it is full, new fences are dropped: the older ones stay
// valid, only more conservative.
const maxFences = 256

// SaverConfig is what a Saver saves, where, and when.
type SaverConfig struct {
	// Store is where checkpoints go; DB captures fences on the server
	// Identity names.
	Store    *Store
	DB       DB
	Identity Identity
	// Prev, if not nil, is the checkpoint to continue from
	// (Resumption.Prev: saved on Identity, or on an ancestor timeline and
	// limited to the WAL it shares with Identity's): positions at or
	// before it are not saved again, except once under Identity when Prev
	// was saved under another identity, and its fence is reused until a
	// newer one applies.
	Prev *Checkpoint
	// Source reports the acknowledged position to save.
	Source func() Acked
	// Interval is the cadence of Run's saves; Retention how long saved
	// history is kept (0: for ever).
	Interval, Retention time.Duration

	// OnSave, if set, is called after each successful save.
	OnSave func(cp Checkpoint)
	// Attempted, if set, is called after every save attempt of Run with
	// its error: nil when the checkpoint now holds the source's snapshot
	// (saved, or found saved already). The source may hold back work
	// until its snapshot was dealt with (Tracker.Saved, SaveFailed).
	Attempted func(err error)
	// SaveTimeout, if positive, bounds each save attempt of Run. A save
	// can block on a lock on the checkpoint table (an open transaction of
	// checkpoint reset, an ALTER TABLE) or on a commit waiting for a
	// synchronous standby that is down; without a bound, a source holding
	// back work for it would stop with nothing in flight to report.
	SaveTimeout time.Duration
	// Kick, if set, asks for a save before the interval ends (without a
	// new fence): the tracker signals it as a large transaction's
	// acknowledged prefix grows, so a crash re-sends little of it. Kicks
	// closer than KickGap to the previous save wait for the gap.
	Kick    <-chan struct{}
	KickGap time.Duration
}

// Saver saves the acknowledged position at a bounded cadence. It never
// saves a position the source has not reported, so a checkpoint is never
// ahead of Kafka's acknowledgements.
type Saver struct {
	cfg SaverConfig
	log *slog.Logger

	saved   pglogrepl.LSN
	decoded pglogrepl.LSN // Decoded of the last save
	// savedCommit and savedXid describe the transaction at saved.
	savedCommit time.Time
	savedXid    uint32
	fence       *Fence  // newest fence at or before saved
	pending     []Fence // fences ahead of the saved position, oldest first
	partial     Partial // Partial of the last save
	// carry is set while the continued checkpoint was saved under another
	// identity (an ancestor timeline): the first Save writes its position
	// again under id, even if nothing moved, so the newest row names the
	// server's timeline (cleanup and replay accept only that).
	carry bool
}

// NewSaver returns a saver of cfg.Source's positions into cfg.Store, its
// logs where opts send them (WithLogger).
func NewSaver(cfg SaverConfig, opts ...Option) *Saver {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&o)
		}
	}
	log := o.logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Saver{cfg: cfg, log: log}
	if prev := cfg.Prev; prev != nil {
		s.saved, s.fence, s.decoded = prev.LSN, prev.Fence, prev.Decoded
		s.savedCommit, s.savedXid = prev.CommitTime, prev.Xid
		s.partial = prev.Partial
		s.carry = prev.Identity != cfg.Identity
	}
	return s
}

// Run saves every interval until ctx is done, then once more (bounded by
// a few seconds) so a clean shutdown leaves the final position. Failures
// are logged and retried at the next tick: a missing checkpoint only costs
// duplicates after a crash, never loss.
func (s *Saver) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	var last time.Time
	for {
		capture := true
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			err := s.Save(fctx, false)
			if err != nil {
				s.log.Warn("final checkpoint not saved", slog.String("stage", "checkpoint"), slog.Any("error", err))
			}
			s.attempted(err)
			cancel()
			return
		case <-t.C:
		case <-s.cfg.Kick:
			capture = false
			if wait := s.cfg.KickGap - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					continue
				}
			}
		}
		last = time.Now()
		s.attempted(s.saveBounded(ctx, capture))
	}
}

// saveBounded is Save within SaveTimeout, logging a failure.
func (s *Saver) saveBounded(ctx context.Context, capture bool) error {
	sctx := ctx
	if s.cfg.SaveTimeout > 0 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(ctx, s.cfg.SaveTimeout)
		defer cancel()
	}
	err := s.Save(sctx, capture)
	switch {
	case err == nil || errors.Is(err, context.Canceled) && ctx.Err() != nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		s.log.Warn("checkpoint save timed out (a lock on the checkpoint table, or a commit waiting for a synchronous standby?); retrying",
			slog.String("stage", "checkpoint"), slog.Duration("timeout", s.cfg.SaveTimeout), slog.Any("error", err))
	default:
		s.log.Warn("checkpoint not saved; retrying", slog.String("stage", "checkpoint"), slog.Any("error", err))
	}
	return err
}

// Save captures a fence (when capture is set) and saves the source's
// position if it moved, or its decoded position did: while Kafka does not
// acknowledge, the decoded position is what a restart needs to tell
// possible duplicates from new events.
func (s *Saver) Save(ctx context.Context, capture bool) error {
	// The position is read before the fence is captured: the fence is then
	// ahead of it and waits in pending until a later position passes it.
	pos := s.cfg.Source()
	if capture {
		f, err := CaptureFence(ctx, s.cfg.DB)
		if err != nil {
			return err
		}
		if len(s.pending) < maxFences {
			s.pending = append(s.pending, f)
		}
	}
	if pos.LSN <= s.saved {
		// The position did not move: keep the saved position (and its
		// transaction; the source may still report an older one).
		pos.LSN, pos.CommitTime, pos.Xid = s.saved, s.savedCommit, s.savedXid
	}
	part := s.partialAt(pos.LSN, pos.Partial)
	if pos.LSN == s.saved && pos.Decoded <= s.decoded && part.Equal(s.partial) && !s.carry {
		return nil
	}
	// The newest fence at or before the position applies to it.
	n := 0
	for n < len(s.pending) && s.pending[n].LSN <= pos.LSN {
		f := s.pending[n]
		s.fence = &f
		n++
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
	cp := Checkpoint{LSN: pos.LSN, CommitTime: pos.CommitTime, Xid: pos.Xid, Identity: s.cfg.Identity, Fence: s.fence,
		Decoded: max(pos.Decoded, s.decoded), Partial: part}
	if err := s.cfg.Store.Save(ctx, cp, s.cfg.Retention); err != nil {
		return err
	}
	s.saved, s.decoded, s.savedCommit, s.savedXid = pos.LSN, cp.Decoded, pos.CommitTime, pos.Xid
	s.partial, s.carry = part, false
	if s.cfg.OnSave != nil {
		s.cfg.OnSave(cp)
	}
	return nil
}

func (s *Saver) attempted(err error) {
	if s.cfg.Attempted != nil {
		s.cfg.Attempted(err)
	}
}

// partialAt is the Partial to save with position lsn, given the source's
// current one. Both the source's and the last saved Partial are facts about
// what Kafka holds, so of the same transaction their union is saved (a
// restarted relay's tracker does not re-acknowledge what it skipped), and
// the saved one is kept while the source knows none. A Partial of a
// transaction that commits before lsn is dropped: that transaction is
// confirmed, so a later restart must not apply it.
func (s *Saver) partialAt(lsn pglogrepl.LSN, cur Partial) Partial {
	if prev := s.partial; !prev.Empty() {
		switch {
		case cur.Empty():
			cur = prev
		case cur.CommitLSN == prev.CommitLSN:
			cur = prev.Union(cur)
		}
	}
	if cur.Empty() || cur.CommitLSN < lsn {
		return Partial{}
	}
	return cur
}
