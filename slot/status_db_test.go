package slot

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
)

// TestStatusOnServer reads a real slot on the server of
// OUTBOX_RELAY_TEST_DATABASE_URL: PostgreSQL 15 in `make integration`,
// 16, 17 and 18 in the version matrix (`make versions`). The Status query
// must hold on every version, and invalidation_reason, read through
// to_jsonb, must be the column 17+ has under that name.
func TestStatusOnServer(t *testing.T) {
	sc := testenv.Reserve(t)
	ctx, pool, name := sc.Ctx, sc.Pool, sc.Schema // the slot takes the reserved schema's unique name
	m := NewManager(pool, Config{Name: name, Publication: name})

	if _, err := m.Status(ctx); !errors.Is(err, ErrSlotNotFound) {
		t.Fatalf("Status of a missing slot = %v, want ErrSlotNotFound", err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, $2)`, name, Plugin); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropSlot(t, pool, name) })
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	var db string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if st.Name != name || st.Plugin != Plugin || st.Database != db || st.Active || st.WALStatus != "reserved" ||
		st.InvalidationReason != "" || st.ConfirmedFlushLSN == 0 || st.CurrentLSN < st.ConfirmedFlushLSN || st.LostError() != nil {
		t.Fatalf("Status of a new slot = %+v", st)
	}
	if err := m.Check(ctx, st); err != nil {
		t.Fatalf("Check of a new slot: %v", err)
	}
	// The reason query itself, which Status runs only for a lost slot.
	if reason, err := m.invalidationReason(ctx); err != nil || reason != "" {
		t.Fatalf("invalidationReason of a valid slot = %q, %v", reason, err)
	}

	var version int
	var hasColumn bool
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int,
		EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = 'pg_catalog.pg_replication_slots'::regclass
			AND attname = 'invalidation_reason' AND NOT attisdropped)`).Scan(&version, &hasColumn); err != nil {
		t.Fatal(err)
	}
	if want := version >= 170000; hasColumn != want {
		t.Fatalf("PostgreSQL %d: pg_replication_slots has invalidation_reason = %v, want %v", version, hasColumn, want)
	}
	t.Logf("PostgreSQL %d: Status %+v", version, st)
}

// dropSlot drops a test's slot when it ends, on a context of its own: the
// test's may be over.
func dropSlot(t *testing.T, db DB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, name); err != nil {
		t.Errorf("drop slot %s: %v", name, err)
	}
}
