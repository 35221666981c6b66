package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/internal/startstop"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// refuseLostSlot stops a start on a missing slot once the relay has run
// before (a checkpoint exists): creating a fresh slot would silently skip
// every event committed since the old one was lost. recover handles it.
func (r *Relay) refuseLostSlot(ctx context.Context) error {
	_, err := r.slots.Status(ctx)
	if !errors.Is(err, slot.ErrSlotNotFound) {
		return nil // Ensure reports other problems
	}
	cp, err := r.checkpoints.Latest(ctx)
	if errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		return nil // first start: Ensure creates the slot
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("slot %q does not exist, but this relay saved a checkpoint at %s (%s): the slot was dropped or lost, "+
		"so events committed since may be missing from Kafka; run \"outbox-relay recover\" to recreate it and back-fill "+
		"from the outbox table (or \"outbox-relay checkpoint reset\" to start fresh, accepting the gap)",
		r.cfg.Database.Slot, cp.LSN, cp.SavedAt.Format("2006-01-02 15:04:05Z07:00"))
}

// resumeState is what a stream attempt knows about its saved position.
type resumeState struct {
	id         checkpoint.Identity
	prev       *checkpoint.Checkpoint
	skipBefore pglogrepl.LSN
	// partial is the acknowledged prefix of a transaction the slot will
	// replay (zero: none).
	partial checkpoint.Partial
	// lineage relates the newest checkpoint's timeline to the server's.
	lineage checkpoint.Lineage
	// walEnd is the server's WAL end when the stream started
	// (IDENTIFY_SYSTEM): no position of this server's history lies past
	// it.
	walEnd pglogrepl.LSN
	// kafka is the position read from Kafka when it was applied
	// (withKafkaPosition), under kafkaKey: what it skips counts only once
	// the stream found its event (positionCheck).
	kafka    *kafkaPosition
	kafkaKey string
}

// resume identifies the server and compares the newest checkpoint with the
// slot. A checkpoint of another cluster, or of a timeline this server's
// does not descend from, stops the relay; one of an ancestor timeline (a
// promoted standby of the same cluster) applies up to where that timeline
// ended.
func (r *Relay) resume(ctx context.Context, conn *pgconn.PgConn, st slot.Status) (resumeState, error) {
	id, walEnd, err := checkpoint.Identify(ctx, conn)
	if err != nil {
		return resumeState{}, err
	}
	res, err := r.checkpoints.Resume(ctx, conn, id, st.ConfirmedFlushLSN, walEnd)
	if err != nil {
		var mismatch *checkpoint.MismatchError
		var ahead *checkpoint.AheadError
		if errors.As(err, &mismatch) || errors.As(err, &ahead) {
			return resumeState{}, poison.Permanent(err)
		}
		return resumeState{}, err
	}
	r.logLineage(res, id, st.ConfirmedFlushLSN)
	prev, skip := res.Prev, res.SkipBefore
	if skip != 0 {
		r.log.Info("checkpoint is ahead of the slot: transactions before it were acknowledged by Kafka and are skipped, not re-published", slog.String("stage", "checkpoint"), slog.String("confirmed_flush_lsn", st.ConfirmedFlushLSN.String()), slog.String("checkpoint_lsn", skip.String()), slog.Uint64("bytes", uint64(skip-st.ConfirmedFlushLSN)))
	}
	rs := resumeState{id: id, prev: prev, skipBefore: skip, lineage: res.Lineage, walEnd: walEnd}
	// The slot replays the transaction of the partial unless it confirmed
	// past its commit (then the partial is stale and never matches).
	if prev != nil && !prev.Partial.Empty() && prev.Partial.CommitLSN >= st.ConfirmedFlushLSN {
		rs.partial = prev.Partial
	}
	return rs, nil
}

// logLineage reports a checkpoint saved on an earlier timeline: applied
// when it is within the WAL this timeline shares, otherwise a warning that
// the old primary may have published events this timeline lacks.
func (r *Relay) logLineage(res checkpoint.Resumption, id checkpoint.Identity, confirmed pglogrepl.LSN) {
	lin := res.Lineage
	if !lin.Ancestor {
		return
	}
	attrs := []any{slog.String("stage", "checkpoint"), slog.Int64("checkpoint_timeline", int64(lin.Timeline)),
		slog.Int64("timeline", int64(id.Timeline)), slog.String("switch_point", lin.End.String()),
		slog.String("confirmed_flush_lsn", confirmed.String())}
	if d := res.Diverged; d != nil {
		r.log.Warn("checkpoint was saved past the point where its timeline ended on the way to this server's (the relay confirmed WAL this promoted standby never received): "+
			"nothing is skipped, streaming resumes from the slot's position (duplicates, never loss); events committed past the switch point may have been published from the old primary although this timeline lacks them",
			append(attrs, slog.String("checkpoint_lsn", d.LSN.String()))...)
		return
	}
	r.log.Info("checkpoint was saved on an earlier timeline of this cluster (a promoted standby), before that timeline ended: it applies here",
		append(attrs, slog.String("checkpoint_lsn", res.Prev.LSN.String()))...)
}

// prevDecoded is the saved checkpoint's decoded position (0: unknown).
func (rs resumeState) prevDecoded() pglogrepl.LSN {
	if rs.prev == nil {
		return 0
	}
	return rs.prev.Decoded
}

func (rs resumeState) skipper(log *slog.Logger, m *metrics.Relay) *skipper {
	if rs.skipBefore == 0 && rs.partial.Empty() {
		return nil
	}
	return &skipper{before: rs.skipBefore, part: rs.partial, log: log, m: m}
}

// skipper drops what a checkpoint shows Kafka acknowledged already: the
// transactions that commit before the checkpoint (a transaction whose
// commit LSN is before the checkpoint, a TransactionEndLSN, ended at or
// before it), and the acknowledged events of the transaction the
// checkpoint's Partial names (by its commit LSN, which is unique in the
// WAL of the identity Resume verified). Its methods are no-ops on nil. Only
// the stream goroutine calls it.
type skipper struct {
	before pglogrepl.LSN
	active bool
	// part is the partial still to apply; in is it while the current
	// transaction is the one it names.
	part   checkpoint.Partial
	in     checkpoint.Partial
	events int
	log    *slog.Logger
	m      *metrics.Relay
}

func (k *skipper) begin(b replication.Begin) {
	if k == nil {
		return
	}
	k.active, k.in = false, checkpoint.Partial{}
	if k.before != 0 {
		if b.FinalLSN < k.before {
			k.active = true
			return
		}
		k.log.Info("caught up with the checkpoint; publishing again", slog.String("stage", "checkpoint"), slog.Int("skipped_events", k.events), slog.String("checkpoint_lsn", k.before.String()))
		k.before = 0
	}
	if p := k.part; !p.Empty() && b.FinalLSN >= p.CommitLSN {
		if b.FinalLSN == p.CommitLSN {
			k.in = p
			k.log.Info("restarting inside a partly acknowledged transaction: its first events were acknowledged by Kafka and are skipped, not re-published", slog.String("stage", "checkpoint"), slog.String("commit_lsn", p.CommitLSN.String()), slog.Int64("xid", int64(b.Xid)), slog.Int("prefix_events", p.Events), slog.Int("skipped_events", p.Known()))
		}
		k.part = checkpoint.Partial{} // applied, or passed
	}
}

// skip is what the skipper decides for one event.
type skip int

const (
	// publish: not known to Kafka.
	publish skip = iota
	// skipTransaction: its whole transaction commits before the
	// checkpoint position.
	skipTransaction
	// skipSettled: the checkpoint's Partial names it; the tracker must
	// settle it (Tracker.Settle).
	skipSettled
)

// skipping decides for the event at ordinal of the current transaction,
// and counts a skipped one.
func (k *skipper) skipping(ordinal int) skip {
	var d skip
	switch {
	case k == nil:
		return publish
	case k.active:
		d = skipTransaction
	case k.in.Has(ordinal):
		d = skipSettled
	default:
		return publish
	}
	k.events++
	k.m.CheckpointSkipped.Inc()
	return d
}

// checkpointSaveTimeout bounds one checkpoint save (a single-row write):
// past it the save is abandoned and retried, and the acknowledgements held
// for it are released (see startSaver).
const checkpointSaveTimeout = 5 * time.Second

// kickStep is how many unsaved acknowledgements of a large transaction
// ask for a checkpoint save: an eighth of the window, at least 128 so
// small windows do not save at every event, but never more than half the
// window, so the hold cannot fill the window before a save is asked for.
func kickStep(window int) int {
	return min(max(window/8, 128), max(window/2, 1))
}

// startSaver saves the tracker's acknowledged position at the configured
// cadence until the returned service is stopped (Stop is idempotent and
// waits for the final save: no save of this stream runs after it, nor
// after Run returned).
func (r *Relay) startSaver(rs resumeState, tr *checkpoint.Tracker) *startstop.Service {
	if r.cfg.Checkpoints.Interval <= 0 {
		return startstop.New(func(context.Context) {}) // never started: Stop returns at once
	}
	// tok is what the snapshot being saved knew; the saver goroutine both
	// takes the snapshot and reports the attempt.
	var tok checkpoint.SaveToken
	// What is acknowledged of a large transaction is saved every kickStep
	// acknowledgements (at most every 10 ms), not only every interval, and
	// until a saved checkpoint contains them those acknowledgements hold
	// window space: a crash then re-sends at most about the window,
	// whatever the throughput. A save that fails or times out releases
	// them all the same: duplicates after a crash beat a stream stopped
	// by a locked checkpoint table.
	sv := checkpoint.NewSaver(checkpoint.SaverConfig{
		Store: r.checkpoints, DB: r.pool, Identity: rs.id, Prev: rs.prev,
		Source: func() checkpoint.Acked {
			a := tr.Last()
			tok, a.Decoded = a.Token, r.decoded.load()
			return a
		},
		Interval: r.cfg.Checkpoints.Interval, Retention: r.cfg.Checkpoints.Retention,
		Kick: tr.NotifyAcks(kickStep(r.cfg.Window.MaxEvents)), KickGap: 10 * time.Millisecond,
		SaveTimeout: checkpointSaveTimeout,
		Attempted: func(err error) {
			if err == nil {
				tr.Saved(tok)
				return
			}
			if !errors.Is(err, context.Canceled) {
				r.m.CheckpointSaveFailures.Inc()
			}
			if n := tr.SaveFailed(tok); n > 0 {
				r.log.Warn("acknowledgements held for a checkpoint save released without it: a crash now re-sends them on top of the in-flight window",
					slog.String("stage", "checkpoint"), slog.Int("released_events", n), slog.Any("error", err))
			}
		},
		OnSave: func(cp checkpoint.Checkpoint) {
			r.m.CheckpointSaves.Inc()
			r.m.CheckpointLSN.Set(float64(cp.LSN))
			r.log.Debug("checkpoint saved", slog.String("stage", "checkpoint"), slog.String("lsn", cp.LSN.String()))
		},
	}, checkpoint.WithLogger(r.log))
	saver := startstop.New(func(ctx context.Context) {
		defer r.loopExit("saver")
		sv.Run(ctx)
	})
	// Not the stream's context: the saver stops when the stream has, with
	// a final save of what was acknowledged by then.
	saver.Start(context.Background())
	return saver
}
