package checkpoint

import "time"

// The tests' shorthands for the Tracker calls the stream makes with more
// arguments: a transaction without a known xid or commit LSN, events
// tracked in order, acknowledged without their sequence number. They are
// not API: the relay always knows what they leave out.

// begin is BeginTx for a transaction of unknown xid and commit LSN.
func (t *Tracker) begin(commitTime time.Time) *Txn { return t.beginXid(commitTime, 0) }

// beginXid is BeginTx for a transaction of unknown commit LSN (no Partial).
func (t *Tracker) beginXid(commitTime time.Time, xid uint32) *Txn {
	return t.BeginTx(commitTime, xid, 0)
}

// track is TrackOrdinal for the event after tx's previous one.
func (t *Tracker) track(tx *Txn, bytes int) Seq { return t.TrackOrdinal(tx, -1, bytes) }

// ack acknowledges one event of size bytes of tx without saying which: the
// flush position moves as usual, the Partial only once the transaction is
// confirmed.
func (tx *Txn) ack(bytes int) {
	tx.t.mu.Lock()
	tx.ackLocked(bytes)
}
