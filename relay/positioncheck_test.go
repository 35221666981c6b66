package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/replication"
)

// walTx is one transaction of the WAL a test stream replays: its commit
// LSN, its end, and its events' ids in order.
type walTx struct {
	final, end pglogrepl.LSN
	ids        []string
}

// TestKafkaPositionCheckedInWAL: a position read from Kafka on the
// server's system and timeline, before its WAL end, is applied only once
// the stream finds at it the event the record names; until then nothing
// it skips is confirmed to the slot or saved. A server restored from a
// disk snapshot keeps its system identifier and timeline, and its WAL
// may have grown past the old position before the relay starts: the
// checks of the identity and the WAL end pass, and the transactions of
// the new history before the position would be skipped, and confirmed:
// lost. The stream stops at the first transaction at or past the
// position instead (*PositionMismatchError), with the slot where it was.
func TestKafkaPositionCheckedInWAL(t *testing.T) {
	const start, key = pglogrepl.LSN(0x100), "7/db/s"
	id := checkpoint.Identity{SystemID: "7", Timeline: 1}
	// The position: the second event (e-300-1) of the transaction
	// committing at 0/300.
	kafkaPos := kafkaPosition{Version: 1, Slot: "s", SystemID: "7", Timeline: 1, CommitLSN: "0/300", Events: 2, EventID: "e-300-1"}
	same := []walTx{ // the history Kafka holds
		{0x200, 0x280, []string{"e-200-0", "e-200-1"}},
		{0x300, 0x380, []string{"e-300-0", "e-300-1"}},
	}
	restored := []walTx{ // a disk snapshot's new history, past 0/300 already
		{0x180, 0x1c0, []string{"n-180-0"}},
		{0x250, 0x290, []string{"n-250-0", "n-250-1"}},
		{0x350, 0x390, nil}, // no outbox event: published if the position were not checked
	}
	for _, c := range []struct {
		name     string
		pos      kafkaPosition
		wal      []walTx
		mismatch bool
		// flushed is the tracker's position once the WAL was replayed
		// (mismatch: when the stream stopped).
		flushed pglogrepl.LSN
	}{
		{name: "the same history: applied once the event is found", pos: kafkaPos, wal: same, flushed: 0x380},
		{name: "a restored server's new history: no transaction at the position", pos: kafkaPos, wal: restored,
			mismatch: true, flushed: start},
		{name: "another event at the position", pos: kafkaPos, mismatch: true, flushed: start,
			wal: []walTx{same[0], {0x300, 0x380, []string{"e-300-0", "n-300-1"}}}},
		{name: "fewer events at the position", pos: kafkaPos, mismatch: true, flushed: start,
			wal: []walTx{same[0], {0x300, 0x380, []string{"n-300-0"}}}},
		{name: "a record without an event id: the transaction and its events are there", flushed: 0x380, wal: same,
			pos: kafkaPosition{Version: 1, Slot: "s", SystemID: "7", Timeline: 1, CommitLSN: "0/300", Events: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			log := slog.New(slog.DiscardHandler)
			pos := c.pos
			rs, err := resumeState{id: id, walEnd: 0x1000}.withKafkaPosition(&pos, key, log)
			if err != nil {
				t.Fatal(err)
			}
			tr := checkpoint.New(start, checkpoint.Limits{MaxEvents: 100})
			m := metrics.New()
			s := &sink{tracker: tr, m: m, skip: rs.skipper(log, m), check: rs.positionCheck(tr, start, log)}
			err = replay(s, c.wal, start)
			var mis *PositionMismatchError
			switch {
			case c.mismatch && !errors.As(err, &mis):
				t.Fatalf("replayed with %v (flushed %s): the transactions before the position were skipped", err, tr.Flushed())
			case c.mismatch && (mis.Key != key || mis.LSN != 0x300 || mis.Events != pos.Events || mis.EventID != pos.EventID):
				t.Fatalf("error %+v", mis)
			case !c.mismatch && err != nil:
				t.Fatal(err)
			}
			if tr.Flushed() != c.flushed {
				t.Fatalf("flushed %s, want %s", tr.Flushed(), c.flushed)
			}
		})
	}
	// A position before the slot's: the slot replays nothing it covers,
	// so it skips nothing and is not checked (the stream would never see
	// its transaction).
	pos := kafkaPosition{Version: 1, Slot: "s", SystemID: "7", Timeline: 1, CommitLSN: "0/F0", Events: 1, EventID: "x"}
	rs, err := resumeState{id: id, walEnd: 0x1000}.withKafkaPosition(&pos, key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if c := rs.positionCheck(checkpoint.New(start, checkpoint.Limits{}), start, slog.New(slog.DiscardHandler)); c != nil {
		t.Fatalf("a position before the slot's is checked: %+v", c)
	}
	// Nor is one the checkpoint is ahead of: it is not applied.
	rs, err = resumeState{id: id, walEnd: 0x1000, skipBefore: 0x400}.withKafkaPosition(&kafkaPos, key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if c := rs.positionCheck(checkpoint.New(start, checkpoint.Limits{}), start, slog.New(slog.DiscardHandler)); c != nil {
		t.Fatalf("a position the checkpoint is ahead of is checked: %+v", c)
	}
}

// replay feeds the transactions to s as the stream would, up to the first
// error. Every event of the tests is one the position skips: the sink has
// no publisher. Until the check is done, nothing is confirmed.
func replay(s *sink, wal []walTx, start pglogrepl.LSN) error {
	for _, tx := range wal {
		if err := s.Begin(replication.Begin{FinalLSN: tx.final, Xid: uint32(tx.final)}); err != nil {
			return err
		}
		for ord, id := range tx.ids {
			ev := &replication.WALEvent{TxLSN: tx.final, Ordinal: ord}
			ev.EventID = id
			if err := s.Insert(ev); err != nil {
				return err
			}
		}
		if err := s.Commit(replication.Commit{CommitLSN: tx.final, EndLSN: tx.end}); err != nil {
			return err
		}
		if flushed := s.tracker.Flushed(); s.check != nil && !s.check.done && flushed != start {
			return fmt.Errorf("confirmed %s before the position was checked", flushed)
		}
	}
	return nil
}
