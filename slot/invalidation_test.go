package slot

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// scanRow scans vals into the destinations by position; destinations past
// the end of vals keep their zero value, so a column added to the Status
// query does not break these tests.
type scanRow struct {
	vals []any
	err  error
}

func (r scanRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	for i, d := range dest {
		if i >= len(r.vals) {
			break
		}
		if r.vals[i] != nil {
			reflect.ValueOf(d).Elem().Set(reflect.ValueOf(r.vals[i]))
		}
	}
	return nil
}

// statusDB answers the Status query with slot and the invalidation_reason
// query with reason, and counts the latter.
type statusDB struct {
	slot, reason   scanRow
	reasonQueries  int
	reasonSlotArgs []any
}

func (db *statusDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("not supported")
}

func (db *statusDB) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "invalidation_reason") {
		db.reasonQueries++
		db.reasonSlotArgs = args
		return db.reason
	}
	return db.slot
}

func strPtr(s string) *string { return &s }

func slotRow(walStatus string) scanRow {
	return scanRow{vals: []any{"s1", strPtr(Plugin), strPtr("outbox"), false, (*int32)(nil), strPtr("0/16B3748"), strPtr("0/16B3700"),
		strPtr(walStatus), (*int64)(nil), "0/16B4000"}}
}

// Before PostgreSQL 17 there is no reason: the message is the one the
// relay has always printed (docs/errors.md quotes it).
func TestLostErrorWithoutReasonIsUnchanged(t *testing.T) {
	err := Status{Name: "s1", WALStatus: "lost"}.LostError()
	want := `slot "s1" was invalidated (wal_status = lost): WAL it needed was removed, so events may be missing; ` +
		`first raise max_slot_wal_keep_size, then recreate the slot and back-fill from the outbox table (outbox-relay recover)`
	if err == nil || err.Error() != want {
		t.Fatalf("LostError = %v\nwant %s", err, want)
	}
	for _, ws := range []string{"", "reserved", "extended", "unreserved"} {
		if err := (Status{Name: "s1", WALStatus: ws, InvalidationReason: ReasonIdleTimeout}).LostError(); err != nil {
			t.Errorf("wal_status %q: LostError = %v, want nil", ws, err)
		}
	}
}

// On 17+ the message names invalidation_reason and the fix for that cause.
func TestLostErrorNamesTheReason(t *testing.T) {
	for _, tc := range []struct {
		reason string
		want   []string
	}{
		{ReasonWALRemoved, []string{"WAL it needed was removed", "raise max_slot_wal_keep_size"}},
		{ReasonIdleTimeout, []string{"inactive longer than idle_replication_slot_timeout", "raise idle_replication_slot_timeout", "0 disables it"}},
		{ReasonRowsRemoved, []string{"catalog rows it needed were removed", "hot_standby_feedback = on", "primary_slot_name"}},
		{ReasonWALLevelInsufficient, []string{"wal_level is below logical", "set wal_level = logical on the primary"}},
		{"some_future_reason", []string{"PostgreSQL invalidated it", "documentation of pg_replication_slots"}},
	} {
		err := Status{Name: "s1", WALStatus: "lost", InvalidationReason: tc.reason}.LostError()
		if err == nil {
			t.Fatalf("%s: LostError = nil", tc.reason)
		}
		// what every lost-slot message says, whatever the version
		want := append([]string{`slot "s1" was invalidated (wal_status = lost, invalidation_reason = ` + tc.reason + `)`,
			"events may be missing", "outbox-relay recover"}, tc.want...)
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: LostError lacks %q: %s", tc.reason, w, err)
			}
		}
	}
}

// Status reads invalidation_reason for a lost slot only (one query more,
// on a path that ends the relay) and carries it into LostError.
func TestStatusReadsTheReasonOfALostSlot(t *testing.T) {
	ctx := context.Background()
	db := &statusDB{slot: slotRow("reserved"), reason: scanRow{vals: []any{strPtr(ReasonIdleTimeout)}}}
	m := NewManager(db, Config{Name: "s1", Publication: "p1"})
	st, err := m.Status(ctx)
	if err != nil || st.InvalidationReason != "" || db.reasonQueries != 0 {
		t.Fatalf("healthy slot: Status = %+v, %v; %d reason queries, want 0", st, err, db.reasonQueries)
	}

	db.slot = slotRow("lost")
	st, err = m.Status(ctx)
	if err != nil || st.InvalidationReason != ReasonIdleTimeout || db.reasonQueries != 1 {
		t.Fatalf("lost slot: Status = %+v, %v; %d reason queries, want 1", st, err, db.reasonQueries)
	}
	if len(db.reasonSlotArgs) != 1 || db.reasonSlotArgs[0] != "s1" {
		t.Errorf("reason query args = %v, want the slot name", db.reasonSlotArgs)
	}
	if err := st.LostError(); err == nil || !strings.Contains(err.Error(), "invalidation_reason = idle_timeout") {
		t.Errorf("LostError = %v", err)
	}

	db.reason = scanRow{vals: []any{(*string)(nil)}} // before 17: no such column, NULL
	if st, err = m.Status(ctx); err != nil || st.InvalidationReason != "" {
		t.Fatalf("lost slot before 17: Status = %+v, %v", st, err)
	}

	db.reason = scanRow{err: errors.New("conn closed")}
	if _, err = m.Status(ctx); err == nil || !strings.Contains(err.Error(), "invalidation_reason") {
		t.Fatalf("reason query failing: Status error = %v", err)
	}
}

// The fix of the cause comes before recover, in every lost-slot message: a
// slot recreated while the cause remains (a decoding standby still without
// hot_standby_feedback) is invalidated again, and operations.md says to fix
// the cause first. The conflict's cause fits a decoding standby's own slot,
// not only one synchronized for failover.
func TestLostErrorFixBeforeRecover(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   Status
		fix  string
	}{
		{"wal removed, before 17", Status{Name: "s1", WALStatus: "lost"}, "raise max_slot_wal_keep_size"},
		{"conflict, 16", Status{Name: "s1", WALStatus: "lost", Conflicting: true, RestartLSN: 1}, "hot_standby_feedback = on"},
		{"rows removed, 17+", Status{Name: "s1", WALStatus: "lost", InvalidationReason: ReasonRowsRemoved}, "hot_standby_feedback = on"},
		{"wal level, 17+", Status{Name: "s1", WALStatus: "lost", InvalidationReason: ReasonWALLevelInsufficient}, "wal_level = logical"},
		{"idle timeout, 18", Status{Name: "s1", WALStatus: "lost", InvalidationReason: ReasonIdleTimeout}, "raise idle_replication_slot_timeout"},
	} {
		err := tc.st.LostError()
		if err == nil {
			t.Fatalf("%s: LostError = nil", tc.name)
		}
		msg := err.Error()
		fix, rec := strings.Index(msg, tc.fix), strings.Index(msg, "outbox-relay recover")
		first := strings.Index(msg, "; first ")
		if fix < 0 || rec < 0 || first < 0 || first > fix || fix > rec {
			t.Errorf("%s: the fix %q must come first, before recover: %s", tc.name, tc.fix, msg)
		}
		if strings.Contains(msg, "synchronized for failover") {
			t.Errorf("%s: the cause names failover synchronization, which a decoding standby's own slot is not: %s", tc.name, msg)
		}
	}
}
