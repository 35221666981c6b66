package slot

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// Exported is a slot created together with an exported snapshot.
type Exported struct {
	Name string
	// ConsistentPoint is where the slot starts: it streams every
	// transaction that commits after it, and the snapshot sees exactly
	// the transactions that committed before it. Together they cover
	// every transaction once, which is what a back-fill needs.
	ConsistentPoint pglogrepl.LSN
	// Snapshot is the exported snapshot's name, for SET TRANSACTION
	// SNAPSHOT. It stays valid until the next command on the replication
	// connection that created it, or until that connection closes.
	Snapshot string
}

var snapshotName = regexp.MustCompile(`^[0-9A-Fa-f-]+$`)

// CreateExported creates the slot (pgoutput) on conn, a replication
// connection, with EXPORT_SNAPSHOT. The publication must exist.
func CreateExported(ctx context.Context, conn *pgconn.PgConn, name string) (Exported, error) {
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, name, Plugin,
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return Exported{}, fmt.Errorf("create slot %q: %w", name, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return Exported{}, fmt.Errorf("create slot %q: consistent point: %w", name, err)
	}
	if !snapshotName.MatchString(res.SnapshotName) {
		return Exported{}, fmt.Errorf("create slot %q: unexpected snapshot name %q", name, res.SnapshotName)
	}
	return Exported{Name: name, ConsistentPoint: lsn, Snapshot: res.SnapshotName}, nil
}

// Hold streams the slot from at on conn without confirming anything past
// it, until ctx is done. While held the slot is active, so a relay started
// meanwhile refuses it ("is active") instead of publishing newer events
// before a back-fill of older ones finishes. What the server sends is
// discarded: it is not confirmed, so the relay receives it again.
func Hold(ctx context.Context, conn *pgconn.PgConn, name string, pluginArgs []string, at pglogrepl.LSN) error {
	err := pglogrepl.StartReplication(ctx, conn, name, at, pglogrepl.StartReplicationOptions{PluginArgs: pluginArgs})
	if err != nil {
		return fmt.Errorf("hold slot %q: %w", name, err)
	}
	status := func() error {
		return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: at, WALFlushPosition: at, WALApplyPosition: at, ClientTime: time.Now(),
		})
	}
	next := time.Now()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if !time.Now().Before(next) {
			if err := status(); err != nil {
				return fmt.Errorf("hold slot %q: %w", name, err)
			}
			next = time.Now().Add(5 * time.Second)
		}
		rctx, cancel := context.WithDeadline(ctx, next)
		msg, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) || ctx.Err() != nil {
				continue
			}
			return fmt.Errorf("hold slot %q: %w", name, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			if len(m.Data) > 0 && m.Data[0] == pglogrepl.PrimaryKeepaliveMessageByteID {
				pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err == nil && pkm.ReplyRequested {
					next = time.Now()
				}
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("hold slot %q: %w", name, pgconn.ErrorResponseToPgError(m))
		case *pgproto3.CopyDone:
			return fmt.Errorf("hold slot %q: server ended the stream", name)
		}
	}
}
