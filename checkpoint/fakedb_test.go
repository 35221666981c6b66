package checkpoint

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeDB is a DB that plays the server for CaptureFence and records what
// Store.Save writes, without a database.
type fakeDB struct {
	mu sync.Mutex
	// wal is the WAL insert position a fence reads; xid the next xid.
	wal pglogrepl.LSN
	xid uint64
	now time.Time
	// captures counts fences captured (the first statement of each).
	captures int
	// updated is the number of rows an UPDATE reports (0: Save inserts).
	updated int64
	// captureErr fails CaptureFence; execErr fails every Exec, deleteErr
	// the prune.
	captureErr, execErr, deleteErr error
	// block, while open, holds every Exec until it is closed or the
	// statement's context ends (a lock on the checkpoint table).
	block chan struct{}
	// writes are the UPDATE and INSERT statements, decoded.
	writes []written
	// deletes are the prune statements' retention arguments, in seconds.
	deletes []float64
}

// written is one checkpoint as Store.Save passed it to the database.
type written struct {
	insert                                  bool
	lsn                                     string
	commit, xid                             any
	system                                  string
	timeline                                int32
	fenceLSN, fenceXmin, fenceXmax, fenceAt any
	decoded                                 any
	partialLSN, partialEvents               any
	partialAcked                            any
}

// fence returns the fence a row names (nil when none).
func (w written) fence() *Fence {
	if w.fenceLSN == nil {
		return nil
	}
	lsn, err := pglogrepl.ParseLSN(w.fenceLSN.(string))
	if err != nil {
		panic(err)
	}
	return &Fence{LSN: lsn, Xmin: uint64(w.fenceXmin.(int64)), Xmax: uint64(w.fenceXmax.(int64)), At: w.fenceAt.(time.Time)}
}

func (d *fakeDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	d.mu.Lock()
	block := d.block
	d.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return pgconn.CommandTag{}, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.execErr != nil {
		return pgconn.CommandTag{}, d.execErr
	}
	sql = strings.TrimSpace(sql)
	switch {
	case strings.HasPrefix(sql, "UPDATE"), strings.HasPrefix(sql, "INSERT"):
		insert := strings.HasPrefix(sql, "INSERT")
		if insert && len(args) != 15 || !insert && len(args) != 16 {
			return pgconn.CommandTag{}, fmt.Errorf("fake: %d arguments", len(args))
		}
		w := written{insert: insert, lsn: args[2].(string), commit: args[3], xid: args[4], system: args[5].(string),
			timeline: args[6].(int32), fenceLSN: args[7], fenceXmin: args[8], fenceXmax: args[9], fenceAt: args[10],
			decoded: args[11], partialLSN: args[12], partialEvents: args[13], partialAcked: args[14]}
		if !insert {
			if d.updated == 0 {
				return pgconn.NewCommandTag("UPDATE 0"), nil
			}
			d.writes = append(d.writes, w)
			return pgconn.NewCommandTag(fmt.Sprintf("UPDATE %d", d.updated)), nil
		}
		d.writes = append(d.writes, w)
		return pgconn.NewCommandTag("INSERT 0 1"), nil
	case strings.HasPrefix(sql, "DELETE"):
		if d.deleteErr != nil {
			return pgconn.CommandTag{}, d.deleteErr
		}
		d.deletes = append(d.deletes, args[2].(float64))
		return pgconn.NewCommandTag("DELETE 0"), nil
	}
	return pgconn.CommandTag{}, fmt.Errorf("fake: unexpected statement %.40s", sql)
}

func (d *fakeDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.captureErr != nil:
		return row{err: d.captureErr}
	case strings.Contains(sql, "pg_snapshot_xmin"):
		d.captures++
		return row{vals: []any{d.xid, d.now}}
	case strings.Contains(sql, "pg_current_wal_insert_lsn"):
		return row{vals: []any{d.wal.String()}}
	case strings.Contains(sql, "pg_snapshot_xmax"):
		return row{vals: []any{d.xid + 1}}
	}
	return row{err: fmt.Errorf("fake: unexpected query %.40s", sql)}
}

// set moves the server on: the WAL to wal, the next xid to xid.
func (d *fakeDB) set(wal pglogrepl.LSN, xid uint64) {
	d.mu.Lock()
	d.wal, d.xid, d.now = wal, xid, time.Unix(int64(xid), 0)
	d.mu.Unlock()
}

func (d *fakeDB) saved() []written {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]written(nil), d.writes...)
}

func (d *fakeDB) captured() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.captures
}

type row struct {
	vals []any
	err  error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("fake: %d destinations for %d values", len(dest), len(r.vals))
	}
	for i, d := range dest {
		switch p := d.(type) {
		case *uint64:
			*p = r.vals[i].(uint64)
		case *string:
			*p = r.vals[i].(string)
		case *time.Time:
			*p = r.vals[i].(time.Time)
		default:
			return fmt.Errorf("fake: cannot scan into %T", d)
		}
	}
	return nil
}
