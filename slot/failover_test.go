package slot

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fakeDB answers server_version_num with version, records Exec's SQL and
// arguments, and reports the slot missing to Status.
type fakeDB struct {
	version int
	standby bool
	execErr error
	execs   []string
	args    [][]any
}

func (f *fakeDB) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	f.execs = append(f.execs, sql)
	f.args = append(f.args, args)
	return pgconn.CommandTag{}, f.execErr
}

func (f *fakeDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if strings.Contains(sql, "server_version_num") {
		return intRow(f.version)
	}
	if sql == "SELECT pg_is_in_recovery()" {
		return boolRow(f.standby)
	}
	return intRow(-1)
}

type boolRow bool

func (r boolRow) Scan(dest ...any) error {
	*dest[0].(*bool) = bool(r)
	return nil
}

type intRow int

func (r intRow) Scan(dest ...any) error {
	if r < 0 {
		return pgx.ErrNoRows
	}
	*dest[0].(*int) = int(r)
	return nil
}

// TestCreateFailoverByVersion: the slot is created with failover = true on
// 17+ unless NoFailover, and with the two-argument call before 17
// (whose servers reject the fifth argument).
func TestCreateFailoverByVersion(t *testing.T) {
	for _, tc := range []struct {
		version  int
		no       bool
		failover bool
	}{
		{170006, false, true},
		{180001, false, true},
		{170006, true, false},
		{160010, false, false},
		{150018, false, false},
	} {
		db := &fakeDB{version: tc.version}
		_, err := NewManager(db, Config{Name: "s", Publication: "p", NoFailover: tc.no}).Create(context.Background())
		if !errors.Is(err, ErrSlotNotFound) { // the fake has no slot to read back
			t.Fatalf("%d: Create: %v", tc.version, err)
		}
		if len(db.execs) != 1 {
			t.Fatalf("%d: execs %q", tc.version, db.execs)
		}
		five := strings.Contains(db.execs[0], "$2, false, false, true)")
		if five != tc.failover {
			t.Errorf("version %d, NoFailover %v: SQL %q, want failover %v", tc.version, tc.no, db.execs[0], tc.failover)
		}
		if db.args[0][0] != "s" || db.args[0][1] != Plugin {
			t.Errorf("args %v", db.args[0])
		}
	}
}

func TestFailoverFlagNamesTheFix(t *testing.T) {
	if failoverCommand(true) != "outbox-relay migrate --failover-slot" || failoverCommand(false) != "outbox-relay migrate --failover-slot=false" {
		t.Fatal(failoverCommand(true), failoverCommand(false))
	}
}

// TestCreateOnStandby: on a standby the slot is created without failover
// (the server refuses it there) while the primary is asked for
// running-transactions records; before 16, or without the primary, it is
// refused with the reason.
func TestCreateOnStandby(t *testing.T) {
	primary := &fakeDB{version: 170006}
	db := &fakeDB{version: 170006, standby: true}
	_, err := NewManager(db, Config{Name: "s", Publication: "p", Primary: primary}).Create(context.Background())
	if !errors.Is(err, ErrSlotNotFound) {
		t.Fatalf("Create: %v", err)
	}
	if len(db.execs) != 1 || strings.Contains(db.execs[0], "true)") {
		t.Errorf("standby execs %q: want one non-failover creation", db.execs)
	}
	if len(primary.execs) == 0 || !strings.Contains(primary.execs[0], "pg_log_standby_snapshot()") {
		t.Errorf("primary execs %q: want pg_log_standby_snapshot()", primary.execs)
	}
	old := &fakeDB{version: 150012, standby: true}
	if _, err := NewManager(old, Config{Name: "s", Primary: primary}).Create(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "needs PostgreSQL 16 or later") || len(old.execs) != 0 {
		t.Errorf("PostgreSQL 15 standby: %v, execs %q", err, old.execs)
	}
	if _, err := NewManager(db, Config{Name: "s"}).Create(context.Background()); err == nil || !strings.Contains(err.Error(), "pg_log_standby_snapshot") {
		t.Errorf("standby without its primary: %v", err)
	}
	refusing := &fakeDB{version: 170006, standby: true, execErr: errors.New("cannot create on this standby")}
	if _, err := NewManager(refusing, Config{Name: "s", Primary: primary}).Create(context.Background()); err == nil ||
		!strings.Contains(err.Error(), "cannot create on this standby") {
		t.Errorf("the standby's refusal: %v", err)
	}
}

// TestConflictingIsLost: a standby's slot invalidated by a conflict is as
// lost as one whose WAL was removed, with the cause on 16 (no reason
// column; wal_status lost, restart_lsn kept) and 17+.
func TestConflictingIsLost(t *testing.T) {
	for _, s := range []Status{
		{Name: "s", WALStatus: "reserved", Conflicting: true},
		{Name: "s", WALStatus: "lost", Conflicting: true, RestartLSN: 0x16B3700},
		{Name: "s", WALStatus: "lost", Conflicting: true, RestartLSN: 0x16B3700, InvalidationReason: ReasonRowsRemoved},
	} {
		err := s.LostError()
		if err == nil || !strings.Contains(err.Error(), "catalog rows it needed were removed") || !strings.Contains(err.Error(), "outbox-relay recover") {
			t.Errorf("%+v: %v", s, err)
		}
	}
	// PostgreSQL 16 says conflicting for every invalidated slot: lost
	// WAL without a reason and without restart_lsn (cleared when the WAL
	// was removed) is WAL removal, not a conflict.
	if err := (Status{Name: "s", WALStatus: "lost", Conflicting: true}).LostError(); err == nil ||
		!strings.Contains(err.Error(), "WAL it needed was removed") || strings.Contains(err.Error(), "catalog rows") {
		t.Errorf("PostgreSQL 16's lost slot: %v", err)
	}
	if err := (Status{Name: "s", WALStatus: "reserved"}).LostError(); err != nil {
		t.Errorf("a healthy slot: %v", err)
	}
}
