package backfill

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// fakeDB answers Query with rows and records the statement.
type fakeDB struct {
	rows     [][]any
	err      error // returned by Query
	rowsErr  error // returned by Rows.Err after the rows
	sql      string
	args     []any
	rowValue []any // what QueryRow scans
}

func (d *fakeDB) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	d.sql, d.args = sql, args
	if d.err != nil {
		return nil, d.err
	}
	return &fakeRows{rows: d.rows, err: d.rowsErr, i: -1}, nil
}

func (d *fakeDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	d.sql, d.args = sql, args
	if d.err != nil {
		return &fakeRows{err: d.err, single: true}
	}
	return &fakeRows{rows: [][]any{d.rowValue}, i: -1, single: true}
}

// fakeRows hands out rows of values; a nil value scans as the zero value
// of the destination (a NULL).
type fakeRows struct {
	rows   [][]any
	i      int
	err    error
	single bool
	closed bool
}

func (r *fakeRows) Close()                                       { r.closed = true }
func (r *fakeRows) Err() error                                   { return r.err }
func (r *fakeRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *fakeRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *fakeRows) Values() ([]any, error)                       { return r.rows[r.i], nil }
func (r *fakeRows) RawValues() [][]byte                          { return nil }
func (r *fakeRows) Conn() *pgx.Conn                              { return nil }
func (r *fakeRows) TypeMap() *pgtype.Map                         { return nil }

func (r *fakeRows) Next() bool {
	if r.closed || r.i+1 >= len(r.rows) {
		return false
	}
	r.i++
	return true
}

func (r *fakeRows) Scan(dest ...any) error {
	if r.single {
		if r.err != nil {
			return r.err
		}
		if !r.Next() {
			return pgx.ErrNoRows
		}
	}
	row := r.rows[r.i]
	if len(dest) != len(row) {
		return fmt.Errorf("fake: %d destinations for %d values", len(dest), len(row))
	}
	for i, d := range dest {
		dv := reflect.ValueOf(d).Elem()
		if row[i] == nil {
			dv.Set(reflect.Zero(dv.Type()))
			continue
		}
		v := reflect.ValueOf(row[i])
		if !v.Type().AssignableTo(dv.Type()) {
			return fmt.Errorf("fake: column %d: %s into %s", i, v.Type(), dv.Type())
		}
		dv.Set(v)
	}
	return nil
}

func strp(s string) *string { return &s }

// outboxRow is one row as Source.Scan reads it.
func outboxRow(id, typ, agg, version string) []any {
	commit := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	return []any{strp(id), strp(typ), strp(agg), strp(version), strp("created"), strp("1"),
		[]byte(`{"id":"` + id + `"}`), strp(`{"outbox_replay":"replay"}`), &commit}
}

// fakePub is a Publisher that acknowledges in bursts: it holds the
// acknowledgements until nothing was published for a moment (the runner
// waits for window space, or is done), so a Runner that let more than its
// window in flight is caught.
type fakePub struct {
	// failAt, if set, makes Publish of that event id fail.
	failAt string
	// noAcks: never acknowledge.
	noAcks bool

	fatal chan error

	mu          sync.Mutex
	got         []*replication.WALEvent
	pending     []publisher.Acker
	inflight    int
	maxInflight int
	kick        chan struct{}
	stop        chan struct{}
	done        chan struct{}
}

var errPublish = errors.New("publish refused")

func newFakePub() *fakePub {
	p := &fakePub{fatal: make(chan error, 1), kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.acker()
	return p
}

func (p *fakePub) Fatal() <-chan error { return p.fatal }

func (p *fakePub) Publish(_ context.Context, ev *replication.WALEvent, ack publisher.Acker) error {
	if ev.EventID == p.failAt {
		return errPublish
	}
	p.mu.Lock()
	p.got = append(p.got, ev)
	p.pending = append(p.pending, ack)
	p.inflight++
	p.maxInflight = max(p.maxInflight, p.inflight)
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return nil
}

func (p *fakePub) acker() {
	defer close(p.done)
	for {
		idle := false
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-time.After(10 * time.Millisecond):
			idle = true
		}
		p.mu.Lock()
		var acks []publisher.Acker
		if !p.noAcks && idle && len(p.pending) > 0 {
			acks, p.pending = p.pending, nil
			p.inflight -= len(acks)
		}
		p.mu.Unlock()
		for _, a := range acks {
			a.Ack(1)
		}
	}
}

func (p *fakePub) close() {
	close(p.stop)
	<-p.done
}

func (p *fakePub) ids() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.got))
	for i, ev := range p.got {
		out[i] = ev.EventID
	}
	return out
}
