package relay

import (
	"errors"
	"fmt"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// classifyStreamErr decides how the relay goes on after a stream attempt
// ended with err (nil: SIGTERM): failures no reconnect can cure become
// poison.Permanent (exit 1, slot position held), decode errors are retried
// a bounded number of times, anything else reconnects.
func (r *Relay) classifyStreamErr(err error) error {
	var relationErr *replication.RelationError
	var rowErr *replication.RowError
	var eventErr *publisher.EventError
	var haltErr *poison.HaltError
	var renamedErr *replication.RelationRenamedError
	var mismatchErr *PositionMismatchError
	if errors.As(err, &relationErr) || errors.As(err, &rowErr) || errors.As(err, &eventErr) || errors.As(err, &haltErr) ||
		errors.As(err, &renamedErr) || errors.As(err, &mismatchErr) {
		return poison.Permanent(err)
	}
	var decodeErr *replication.WALDecodeError
	if errors.As(err, &decodeErr) {
		return r.decodeFails.check(err)
	}
	r.decodeFails.reset()
	return err
}

// maxDecodeAttempts is how many stream attempts in a row may fail on the
// same undecodable pgoutput message before the relay stops.
//
// Why retry at all: a message garbled or cut on its way (a proxy, a
// connection problem) decodes on the next attempt, since the slot replays
// it from the confirmed position; stopping at once would turn a glitch
// into a crash loop under Kubernetes. Why not forever: the server encodes
// the same WAL the same way every time, so a message that fails again at
// the same place is a protocol mismatch or a bug, and reconnecting forever
// would hide it behind a healthy-looking process. Schema problems
// (RelationError, RowError, a renamed outbox) are never retried: the table
// must be fixed first.
const maxDecodeAttempts = 3

// decodeRetries counts consecutive decode failures of one message (the
// same position and error), across the stream attempts of one relay.
type decodeRetries struct {
	key string
	n   int
}

// check returns err, a stream's *replication.WALDecodeError, to be retried
// (reconnect with backoff), or marked poison.Permanent once the same failure
// has repeated maxDecodeAttempts times in a row.
func (d *decodeRetries) check(err error) error {
	var de *replication.WALDecodeError
	if !errors.As(err, &de) {
		return err
	}
	if key := err.Error(); key == d.key {
		d.n++
	} else {
		d.key, d.n = key, 1
	}
	if d.n < maxDecodeAttempts {
		return err
	}
	return poison.Permanent(fmt.Errorf("%w: the same message failed to decode %d times, after reconnecting each time: "+
		"a protocol mismatch or a bug, not a connection problem (report it with the relay and PostgreSQL versions)", err, d.n))
}

// reset forgets the failures: a stream attempt ended another way.
func (d *decodeRetries) reset() { d.key, d.n = "", 0 }
