package relay

// This file holds stream, one replication connection with a fresh tracker
// and publisher, run on its caller's goroutine (lead's, once per
// connection). It has no goroutine of its own beyond what it owns and
// stops before it returns: the checkpoint saver (startSaver, resume.go,
// a startstop service) and the publisher (Publisher.Close waits for its
// goroutines); drive (drive.go) owns the watchers while the stream runs.
// connect, slotGone and closeConn are its steps.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/hint"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
	"github.com/outbox-relay/outbox-relay/slot"
)

// stream runs one replication connection with a fresh tracker and
// publisher, from the slot's confirmed_flush_lsn. Anything in flight from
// an earlier attempt was not confirmed and is redelivered.
//
// lctx is the leadership: its end cancels the stream at once, while the
// end of ctx (SIGTERM) drains it.
func (r *Relay) stream(ctx, lctx context.Context) error {
	// Start-up queries end with either context.
	sctx, scancel := context.WithCancel(lctx)
	defer scancel()
	defer context.AfterFunc(ctx, scancel)()
	conn, start, resume, err := r.connect(ctx, sctx)
	if err != nil {
		return err
	}
	defer closeConn(conn)

	// The quarantine is what the table says now: while this process was a
	// standby or reconnecting, another leader may have quarantined
	// aggregates, and an operator may have lifted others.
	if err := r.quar.Reload(sctx, start); err != nil {
		return err
	}
	r.m.Quarantined.Set(float64(r.quar.Quarantined()))
	// Resolved per stream: the stream recognises the outbox by it under
	// any name (a renamed outbox stops the relay instead of being skipped).
	oid, err := r.outboxOID(sctx)
	if err != nil {
		return err
	}

	tracker := checkpoint.New(start, checkpoint.Limits{MaxEvents: r.cfg.Window.MaxEvents, MaxBytes: r.cfg.Window.MaxBytes})
	r.tracker.Store(tracker)
	var src Source
	if r.cfg.Publish.Delivery == ExactlyOnce {
		if src, err = r.source(sctx, resume.id); err != nil {
			return err
		}
	}
	opts := []publisher.Option{publisher.WithDeadLetters(r.quar), publisher.WithFailureHook(r.failures.record),
		publisher.WithLogger(r.log), publisher.WithMetrics(r.m.Publisher())}
	tc := r.transactionConfig(resume.id, src)
	if tc != nil {
		opts = append(opts, publisher.WithTransactions(*tc))
	}
	pub := r.publish().Publisher(opts...)
	defer pub.Close()
	if tc != nil {
		if resume, err = r.beginTransactions(sctx, pub, resume, src); err != nil {
			return err
		}
	}

	// A permanent publish failure, an invalidated slot or lost leadership
	// cancels the stream; the end of ctx (SIGTERM) drains it.
	streamCtx, cancel := context.WithCancel(lctx)
	defer cancel()
	r.decoded.rebase(resume.id.Timeline, resume.lineage)
	sink := &sink{ctx: streamCtx, tracker: tracker, pub: pub, m: r.m, skip: resume.skipper(r.log, r.m),
		check: resume.positionCheck(tracker, start, r.log), redo: newRedelivery(resume.prevDecoded(), r.decoded.load(), r.log, r.m), decoded: &r.decoded}
	sink.spans = r.publishSpans()
	var progress replication.Progress = tracker
	if r.opts.statusHold > 0 {
		progress = newHeldProgress(tracker, r.opts.statusHold)
	}
	s := replication.NewStream(conn, replication.Config{
		Slot: r.cfg.Database.Slot, Publication: r.cfg.Database.Publication,
		Namespace: r.c.table.Schema, Table: r.c.table.Name,
		TableOID: oid, CurrentName: r.currentName,
		StatusInterval: r.cfg.Database.StatusInterval,
	}, sink, progress, replication.WithLogger(r.log))
	saver := r.startSaver(resume, tracker)
	defer saver.Stop()
	s.OnStatus(func(flush pglogrepl.LSN) {
		r.m.StatusUpdates.Inc()
		r.m.ConfirmedLSN.Set(float64(flush))
		r.m.LastStatusTime.SetToCurrentTime()
	})
	if err := s.Start(sctx, start); err != nil {
		return err
	}
	fatal, err := r.drive(ctx, streamCtx, cancel, s, pub, tracker, start)
	saver.Stop()
	if fatal != nil {
		var te *publisher.TransactionError
		if errors.As(fatal, &te) {
			// The open Kafka transaction is lost, nothing of it was
			// acknowledged: reconnect (after confirming the lock, which
			// a fenced relay no longer holds) and resume from the
			// committed position.
			return fatal
		}
		return poison.Permanent(fatal)
	}
	err = r.classifyStreamErr(err)
	if err == nil {
		r.log.Info("final status sent", slog.String("stage", "shutdown"), slog.String("confirmed_flush_lsn", tracker.Flushed().String()))
	}
	return err
}

// connect checks the slot, opens the replication connection and compares
// the slot with the saved checkpoint; start is where the stream resumes.
func (r *Relay) connect(ctx, sctx context.Context) (conn *pgconn.PgConn, start pglogrepl.LSN, rs resumeState, err error) {
	st, err := r.slots.Status(sctx)
	if err != nil {
		if errors.Is(err, slot.ErrSlotNotFound) {
			err = poison.Permanent(slotGone(err))
		}
		return nil, 0, rs, err
	}
	if err := r.slots.Check(sctx, st); err != nil {
		var active *slot.ActiveError
		if errors.As(err, &active) {
			return nil, 0, rs, r.fence(sctx, active) // likely our previous connection, or the former leader's, still closing
		}
		if sctx.Err() != nil {
			// Check's own query was cut off (a SIGTERM or a lost lease
			// while it ran): no verdict on the slot, so not permanent.
			// Marked permanent, a SIGTERM right after the lock was taken
			// ended the relay with exit 1 (TestWALSafety in CI).
			return nil, 0, rs, err
		}
		return nil, 0, rs, poison.Permanent(err)
	}
	var params map[string]string
	if r.cfg.Database.WALSenderTimeout > 0 {
		params = map[string]string{"wal_sender_timeout": strconv.FormatInt(r.cfg.Database.WALSenderTimeout.Milliseconds(), 10)}
	}
	if conn, err = replication.ConnectParams(sctx, r.cfg.Database.replicationURL(), params, r.cfg.Database.connectOptions()...); err != nil {
		return nil, 0, rs, err
	}
	if rs, err = r.resume(ctx, conn, st); err != nil {
		closeConn(conn)
		// e.g. a role without REPLICATION: reconnecting cannot help, and
		// hint marks it permanent.
		return nil, 0, rs, hint.With(err)
	}
	// Resume exactly at the slot's confirmed position: an earlier LSN is
	// moved forward by the server anyway, a later one would skip events.
	return conn, st.ConfirmedFlushLSN, rs, nil
}

// slotGone explains a slot that vanished while the relay ran: dropped, or
// lost in a failover to a standby that did not have it (no failover slot:
// PostgreSQL before 17, or a slot created without it). Either way recover
// is the fix, as for a start on a lost slot (refuseLostSlot).
func slotGone(err error) error {
	return fmt.Errorf("%w: it was dropped while the relay ran; events after its last position may be missing. "+
		"If the server is a promoted standby, the slot was not a synchronized failover slot. "+
		"Run \"outbox-relay recover\" to recreate it and back-fill from the outbox table", err)
}

// closeConn closes a replication connection, bounded: a cut network must
// not hold up the return to standby.
func closeConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
