package deadletter

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/slot"
)

// SlotStatus reads a slot's row (slot.Manager).
type SlotStatus interface {
	Status(ctx context.Context) (slot.Status, error)
}

// RelayPosition is the relay's delivered position as PostgreSQL records
// it, in either delivery mode: the newest checkpoint of the slot saved on
// this server's system and timeline, and the slot's confirmed_flush_lsn.
// Both are saved from the relay's acknowledgements, which in exactly-once
// mode follow the commit of the range's Kafka transaction, and the relay
// never resumes before either: it starts at the slot and skips up to the
// checkpoint (in exactly-once mode up to the position committed in Kafka,
// which is at or past both). So every event before either is in Kafka for
// good and is not published again as new.
//
// A checkpoint of another timeline (before a promotion) is left out: its
// LSN may name WAL this timeline does not share, and the relay saves one
// of the new timeline at its first save.
type RelayPosition struct {
	// DB is the primary, where the checkpoints are (the server's
	// identity is read there too).
	DB DB
	// Checkpoints are the slot's (nil: none read, --checkpoint-interval 0).
	Checkpoints *checkpoint.Store
	// Slot is the slot, on the primary or the standby the relay decodes
	// from (nil: not read).
	Slot SlotStatus
	// SlotName names the slot in messages.
	SlotName string
}

// Delivered returns the further of the two positions. The slot is read
// only when the checkpoint does not pass need: the checkpoint moves
// every second, the slot less often, and with --replication-url it lives
// on a standby.
func (p RelayPosition) Delivered(ctx context.Context, need pglogrepl.LSN) (Delivered, error) {
	var d Delivered
	if p.Checkpoints != nil {
		cp, err := p.Checkpoints.Latest(ctx)
		switch {
		case errors.Is(err, checkpoint.ErrCheckpointNotFound):
		case err != nil:
			return d, err
		default:
			id, err := p.identity(ctx)
			if err != nil {
				return d, err
			}
			if cp.Identity == id {
				d = Delivered{LSN: cp.LSN, From: "checkpoint"}
			}
		}
	}
	if d.Passes(need) || p.Slot == nil {
		return d, nil
	}
	st, err := p.Slot.Status(ctx)
	if errors.Is(err, slot.ErrSlotNotFound) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	if st.ConfirmedFlushLSN > d.LSN {
		d = Delivered{LSN: st.ConfirmedFlushLSN, From: fmt.Sprintf("confirmed_flush_lsn of slot %q", p.SlotName)}
	}
	return d, nil
}

// identity is the server's system identifier and current timeline, over
// a plain connection: the timeline is the one of the WAL file being
// written (on a primary: the dead-letter table is written there).
func (p RelayPosition) identity(ctx context.Context) (checkpoint.Identity, error) {
	var id checkpoint.Identity
	err := p.DB.QueryRow(ctx, `SELECT `+systemID+`,
		('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`).Scan(&id.SystemID, &id.Timeline)
	if err != nil {
		return id, fmt.Errorf("read the server's system identifier and timeline: %w", err)
	}
	return id, nil
}
