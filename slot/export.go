package slot

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
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
// connection, with an exported snapshot; on PostgreSQL 17+ as a failover
// slot unless cfg.NoFailover. The publication must exist.
//
// With cfg.Primary, conn is a hot standby of it (PostgreSQL 16+): the
// slot lives there, is never a failover slot, and the primary is asked
// for the running-transactions record the creation waits for. The
// snapshot is then the standby's, to be imported on the standby.
func CreateExported(ctx context.Context, conn *pgconn.PgConn, cfg Config) (Exported, error) {
	name := cfg.Name
	v, err := replicationServerVersion(ctx, conn)
	if err != nil {
		return Exported{}, fmt.Errorf("create slot %q: %w", name, err)
	}
	sql := fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL %s EXPORT_SNAPSHOT", quoteIdent(name), Plugin)
	switch {
	case cfg.Primary != nil:
		stop, err := cfg.askPrimary(ctx, v)
		if err != nil {
			return Exported{}, fmt.Errorf("create slot %q: %w", name, err)
		}
		defer stop()
	case cfg.failoverOn(v):
		sql = fmt.Sprintf("CREATE_REPLICATION_SLOT %s LOGICAL %s (SNAPSHOT 'export', FAILOVER)", quoteIdent(name), Plugin)
	}
	res, err := pglogrepl.ParseCreateReplicationSlot(conn.Exec(ctx, sql))
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

// replicationServerVersion reads server_version_num on a replication
// connection, where SHOW is one of the few commands there are.
func replicationServerVersion(ctx context.Context, conn *pgconn.PgConn) (int, error) {
	res, err := conn.Exec(ctx, "SHOW server_version_num").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("read server_version_num: %w", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return 0, errors.New("read server_version_num: unexpected result shape")
	}
	v, err := strconv.Atoi(string(res[0].Rows[0][0]))
	if err != nil {
		return 0, fmt.Errorf("read server_version_num: %w", err)
	}
	return v, nil
}
