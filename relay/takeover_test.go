package relay

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

type fakeConfirmer struct{ err error }

func (f fakeConfirmer) Confirm(context.Context) error { return f.err }

// terminateDB answers the takeover's query with row (or err) and records
// what was asked.
type terminateDB struct {
	ended bool
	err   error
	sql   string
	args  []any
}

func (db *terminateDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	db.sql, db.args = sql, args
	return db
}

func (db *terminateDB) Scan(dest ...any) error {
	if db.err != nil {
		return db.err
	}
	*dest[0].(*bool) = db.ended
	return nil
}

// The takeover ends the walsender only with the lock confirmed by the
// server, only while that pid still holds this slot, and says how to fix a
// refusal; a walsender gone meanwhile counts as ended.
func TestEndWalsender(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		lease     error
		db        terminateDB
		ended     bool
		asked     bool
		errSubstr string
	}{
		{name: "ended", db: terminateDB{ended: true}, ended: true, asked: true},
		{name: "released meanwhile", db: terminateDB{err: pgx.ErrNoRows}, ended: true, asked: true},
		{name: "lock not confirmed", lease: errors.New("leadership lost"), asked: false, errSubstr: "left alone"},
		{name: "not allowed", db: terminateDB{err: &pgconn.PgError{Code: "42501", Message: "permission denied to terminate process"}},
			asked: true, errSubstr: "pg_signal_backend"},
		{name: "did not exit in time", db: terminateDB{ended: false}, asked: true, errSubstr: "did not exit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := tc.db
			ended, err := endWalsender(ctx, fakeConfirmer{tc.lease}, &db, "s1", 4242)
			if ended != tc.ended {
				t.Errorf("ended = %v, want %v (err %v)", ended, tc.ended, err)
			}
			if asked := db.sql != ""; asked != tc.asked {
				t.Fatalf("terminate asked = %v, want %v", asked, tc.asked)
			}
			if tc.asked && (!strings.Contains(db.sql, "pg_terminate_backend(active_pid") || !strings.Contains(db.sql, "active_pid = $2") ||
				db.args[0] != "s1" || db.args[1] != int32(4242)) {
				t.Errorf("query %q %v: must end only the pid that holds this slot", db.sql, db.args)
			}
			if tc.errSubstr == "" && err != nil || tc.errSubstr != "" && (err == nil || !strings.Contains(err.Error(), tc.errSubstr)) {
				t.Errorf("err = %v, want one containing %q", err, tc.errSubstr)
			}
		})
	}
}
