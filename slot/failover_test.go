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
	execs   []string
	args    [][]any
}

func (f *fakeDB) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	f.execs = append(f.execs, sql)
	f.args = append(f.args, args)
	return pgconn.CommandTag{}, nil
}

func (f *fakeDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if strings.Contains(sql, "server_version_num") {
		return intRow(f.version)
	}
	return intRow(-1)
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
