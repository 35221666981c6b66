package position

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"
)

// Acked is the acknowledged position a Saver saves: everything before LSN
// is acknowledged by Kafka.
type Acked struct {
	LSN        pglogrepl.LSN
	CommitTime time.Time
	Xid        uint32
	// Decoded is the highest TransactionEndLSN whose events were handed to
	// the publisher (0: unknown); saved as Checkpoint.Decoded.
	Decoded pglogrepl.LSN
}

// maxFences bounds the fences a Saver holds while the relay lags behind
// the WAL. When it is full, new fences are dropped: the older ones stay
// valid, only more conservative.
const maxFences = 256

// Saver saves the acknowledged position at a bounded cadence. It never
// saves a position the source has not reported, so a checkpoint is never
// ahead of Kafka's acknowledgements.
type Saver struct {
	store     *Store
	id        Identity
	db        DB
	source    func() Acked
	interval  time.Duration
	retention time.Duration
	log       zerolog.Logger

	saved   pglogrepl.LSN
	decoded pglogrepl.LSN // Decoded of the last save
	// savedCommit and savedXid describe the transaction at saved.
	savedCommit time.Time
	savedXid    uint32
	fence       *Fence  // newest fence at or before saved
	pending     []Fence // fences ahead of the saved position, oldest first

	// OnSave, if set, is called after each successful save.
	OnSave func(cp Checkpoint)
}

// NewSaver returns a saver of source's positions into store, on the
// server identified by id. prev, if not nil, is the checkpoint to continue
// from (already verified against id): positions at or before it are not
// saved again, and its fence is reused until a newer one applies.
func NewSaver(store *Store, db DB, id Identity, prev *Checkpoint, source func() Acked,
	interval, retention time.Duration, log zerolog.Logger) *Saver {
	s := &Saver{store: store, db: db, id: id, source: source, interval: interval, retention: retention, log: log}
	if prev != nil {
		s.saved, s.fence, s.decoded = prev.LSN, prev.Fence, prev.Decoded
		s.savedCommit, s.savedXid = prev.CommitTime, prev.Xid
	}
	return s
}

// Run saves every interval until ctx is done, then once more (bounded by
// a few seconds) so a clean shutdown leaves the final position. Failures
// are logged and retried at the next tick: a missing checkpoint only costs
// duplicates after a crash, never loss.
func (s *Saver) Run(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			if err := s.Save(fctx, false); err != nil {
				s.log.Warn().Str("stage", "checkpoint").Err(err).Msg("final checkpoint not saved")
			}
			cancel()
			return
		case <-t.C:
		}
		if err := s.Save(ctx, true); err != nil && !errors.Is(err, context.Canceled) {
			s.log.Warn().Str("stage", "checkpoint").Err(err).Msg("checkpoint not saved; retrying")
		}
	}
}

// Save captures a fence (when capture is set) and saves the source's
// position if it moved, or its decoded position did: while Kafka does not
// acknowledge, the decoded position is what a restart needs to tell
// possible duplicates from new events.
func (s *Saver) Save(ctx context.Context, capture bool) error {
	// The position is read before the fence is captured: the fence is then
	// ahead of it and waits in pending until a later position passes it.
	pos := s.source()
	if capture {
		f, err := CaptureFence(ctx, s.db)
		if err != nil {
			return err
		}
		if len(s.pending) < maxFences {
			s.pending = append(s.pending, f)
		}
	}
	if pos.LSN <= s.saved && pos.Decoded <= s.decoded {
		return nil
	}
	if pos.LSN <= s.saved {
		// Only the decoded position moved: keep the saved position (and
		// its transaction; the source may still report an older one).
		pos.LSN, pos.CommitTime, pos.Xid = s.saved, s.savedCommit, s.savedXid
	}
	// The newest fence at or before the position applies to it.
	n := 0
	for n < len(s.pending) && s.pending[n].LSN <= pos.LSN {
		f := s.pending[n]
		s.fence = &f
		n++
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
	cp := Checkpoint{LSN: pos.LSN, CommitTime: pos.CommitTime, Xid: pos.Xid, Identity: s.id, Fence: s.fence,
		Decoded: max(pos.Decoded, s.decoded)}
	if err := s.store.Save(ctx, cp, s.retention); err != nil {
		return err
	}
	s.saved, s.decoded, s.savedCommit, s.savedXid = pos.LSN, cp.Decoded, pos.CommitTime, pos.Xid
	if s.OnSave != nil {
		s.OnSave(cp)
	}
	return nil
}
