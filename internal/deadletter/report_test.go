package deadletter

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/replication"
)

func testEntry() Entry {
	v := int64(3)
	failed := time.Date(2026, 12, 2, 18, 4, 5, 0, time.UTC)
	return Entry{
		EventID: "e-1", Aggregate: Aggregate{Type: "order", ID: "o-1"}, AggregateVersion: &v, EventType: "order.placed",
		Payload: []byte(`{"total":3}`), Topic: "outbox.event.order", Pos: replication.Position{TxLSN: 0x16B3748, Ordinal: 2},
		Status: StatusDead, Reason: "message too large", Class: "too_large", Attempts: 1,
		FirstFailedAt: failed, LastFailedAt: failed,
	}
}

func TestWriteEntriesTable(t *testing.T) {
	long := testEntry()
	long.EventID, long.AggregateVersion, long.Status = "e-2", nil, StatusParked
	long.Reason = strings.Repeat("r", 100)
	var b bytes.Buffer
	if err := WriteEntries(&b, []Entry{testEntry(), long}, false); err != nil {
		t.Fatal(err)
	}
	want := "EVENT_ID  AGGREGATE  VERSION  EVENT_TYPE    STATUS  ATTEMPTS  LAST_FAILED          REASON\n" +
		"e-1       order/o-1  3        order.placed  dead    1         2026-12-02 18:04:05  message too large\n" +
		"e-2       order/o-1  -        order.placed  parked  1         2026-12-02 18:04:05  " + strings.Repeat("r", 77) + "...\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriteEntriesJSONLeavesPayloadOut(t *testing.T) {
	bin := testEntry()
	bin.Payload = []byte{0xff, 0x00}
	var b bytes.Buffer
	if err := WriteEntries(&b, []Entry{testEntry(), bin}, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one JSON line per entry:\n%s", b.String())
	}
	for _, l := range lines {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if _, ok := m["payload"]; ok {
			t.Errorf("payload listed: %s", l)
		}
		if _, ok := m["payload_base64"]; ok {
			t.Errorf("payload listed: %s", l)
		}
		if m["event_id"] != "e-1" || m["tx_lsn"] != "0/16B3748" || m["aggregate_version"] != 3.0 {
			t.Errorf("entry: %s", l)
		}
	}
}

func TestWriteEntry(t *testing.T) {
	var b bytes.Buffer
	if err := WriteEntry(&b, testEntry()); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if m["payload"] != `{"total":3}` || m["payload_bytes"] != 11.0 || m["status"] != "dead" || !strings.Contains(b.String(), "\n  \"") {
		t.Errorf("entry:\n%s", b.String())
	}
	// Bytes that are not text are shown in base64.
	e := testEntry()
	e.Payload = []byte{0xff, 0x00}
	b.Reset()
	if err := WriteEntry(&b, e); err != nil {
		t.Fatal(err)
	}
	m = nil
	if err := json.Unmarshal(b.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["payload"]; ok || m["payload_base64"] != "/wA=" {
		t.Errorf("binary payload:\n%s", b.String())
	}
}

func TestResultWrite(t *testing.T) {
	agg := Aggregate{Type: "order", ID: "o-1"}
	lifted := Result{Aggregate: agg, Lifted: true, Outcomes: []Outcome{{EventID: "e-1", Status: StatusPublished}, {EventID: "e-2", Status: StatusPublished}}}
	var b bytes.Buffer
	lifted.Write(&b)
	if want := "e-1\tpublished\ne-2\tpublished\naggregate order/o-1: quarantine lifted (2 events re-published)\n"; b.String() != want {
		t.Errorf("lifted: got %q, want %q", b.String(), want)
	}
	if err := lifted.Err(); err != nil {
		t.Errorf("lifted: %v", err)
	}

	failed := Result{Aggregate: agg, Outcomes: []Outcome{
		{EventID: "e-1", Status: StatusPublished}, {EventID: "e-2", Status: StatusDead, Error: "too large"}, {EventID: "e-3", Status: StatusParked},
	}}
	b.Reset()
	failed.Write(&b)
	if want := "e-1\tpublished\ne-2\tstill failing: too large\ne-3\tparked\n"; b.String() != want {
		t.Errorf("failed: got %q, want %q", b.String(), want)
	}
	if err := failed.Err(); err == nil || err.Error() != "aggregate order/o-1 stays quarantined: an event still fails" {
		t.Errorf("failed: %v", err)
	}
	if errors.Is(failed.Err(), ErrEntryNotFound) {
		t.Error("a failed retry is not ErrEntryNotFound")
	}
}
