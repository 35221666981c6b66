package report

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/slot"
)

// TestSlotKeys: the keys `slot status` prints, which scripts and the
// docs read, stay as they were when the report moved here.
func TestSlotKeys(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, Slot(slot.Status{Name: "s", SafeWALSize: -1})); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := "active active_pid confirmed_flush_lsn current_wal_lsn database failover lag_bytes plugin restart_lsn retained_bytes safe_wal_size slot wal_status"
	if strings.Join(keys, " ") != want {
		t.Errorf("keys %v, want %s", keys, want)
	}
	if !strings.Contains(b.String(), "\n  \"") {
		t.Errorf("not indented: %s", b.String())
	}
}
