package relay

import (
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/metrics"
	"github.com/outbox-relay/outbox-relay/replication"
)

// decodedMark is the highest TransactionEndLSN whose events this process
// handed to the publisher, across stream attempts. The checkpoint saver
// persists it (decoded_lsn, migration 4), so the next run — after a crash,
// a reconnect or a failover — can tell events that were possibly
// delivered already from new ones.
type decodedMark struct {
	lsn atomic.Uint64
	// timeline is the server timeline lsn was recorded on (0: none yet).
	timeline atomic.Int32
}

// rebase moves the mark to the timeline of a new stream attempt, before
// it streams. After a promotion the mark of the old timeline names other
// WAL past that timeline's end: it is capped at the switch point when the
// checkpoint's lineage describes that timeline, and dropped otherwise, so
// new transactions are not counted as redelivered.
func (d *decodedMark) rebase(timeline int32, lin checkpoint.Lineage) {
	old := d.timeline.Swap(timeline)
	if old == 0 || old == timeline {
		return
	}
	if lin.Ancestor && lin.Timeline == old {
		d.lsn.Store(min(d.lsn.Load(), uint64(lin.End)))
		return
	}
	d.lsn.Store(0)
}

func (d *decodedMark) advance(lsn pglogrepl.LSN) {
	for {
		cur := d.lsn.Load()
		if uint64(lsn) <= cur || d.lsn.CompareAndSwap(cur, uint64(lsn)) {
			return
		}
	}
}

func (d *decodedMark) load() pglogrepl.LSN { return pglogrepl.LSN(d.lsn.Load()) }

// redelivery counts, at the start of a stream, the published events of
// transactions an earlier run (or an earlier stream of this process) had
// handed to the publisher already: those committing before upTo, the
// newest decoded position known. Transactions the checkpoint skips are
// not published, so they are not counted. Methods are no-ops on nil; only
// the stream goroutine calls them.
type redelivery struct {
	upTo   pglogrepl.LSN
	active bool
	events int
	log    *slog.Logger
	m      *metrics.Relay
}

// newRedelivery returns the counter for a stream resuming after a saved
// decoded position prevDecoded (0: unknown) in a process whose own mark
// is own; nil when neither is known (a first start).
func newRedelivery(prevDecoded, own pglogrepl.LSN, log *slog.Logger, m *metrics.Relay) *redelivery {
	upTo := max(prevDecoded, own)
	if upTo == 0 {
		return nil
	}
	return &redelivery{upTo: upTo, log: log, m: m}
}

// begin is called for each transaction: one committing before upTo was
// handed to the publisher before (a transaction's commit record precedes
// its TransactionEndLSN, so FinalLSN < upTo means EndLSN <= upTo).
func (d *redelivery) begin(b replication.Begin) {
	if d == nil || d.upTo == 0 {
		return
	}
	if b.FinalLSN < d.upTo {
		d.active = true
		return
	}
	if d.events > 0 {
		d.log.Info("passed the earlier run's decoded position: events before it were published again (possible duplicates)", slog.String("stage", "checkpoint"), slog.Int("redelivered_events", d.events), slog.String("decoded_lsn", d.upTo.String()))
	}
	d.upTo, d.active = 0, false
}

// published counts one event handed to the publisher.
func (d *redelivery) published() {
	if d == nil || !d.active {
		return
	}
	d.events++
	d.m.EventsRedelivered.Inc()
}
