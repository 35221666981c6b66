package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// recorder is an Execer that records statements instead of running them.
type recorder struct {
	calls []call
	err   error
}

type call struct {
	sql  string
	args []any
}

func (r *recorder) Exec(_ context.Context, sql string, args ...any) error {
	r.calls = append(r.calls, call{sql: sql, args: args})
	return r.err
}

var testTable = migrations.Table{Schema: "public", Name: "outbox"}

func validEvent() *Event {
	return &Event{
		AggregateType:    "order",
		AggregateID:      "o-1",
		AggregateVersion: 2,
		EventType:        "order.confirmed",
		SchemaVersion:    1,
		Payload:          []byte(`{"id":"o-1"}`),
		Headers:          map[string]string{"trace_id": "abc"},
	}
}

func TestAppendWritesRow(t *testing.T) {
	w := NewWriter(testTable)
	r := &recorder{}
	e := validEvent()
	if err := w.Append(context.Background(), r, e); err != nil {
		t.Fatal(err)
	}
	if e.EventID == uuid.Nil || e.EventID.Version() != 7 {
		t.Fatalf("EventID = %v (version %d), want a UUIDv7", e.EventID, e.EventID.Version())
	}
	if len(r.calls) != 1 {
		t.Fatalf("got %d Exec calls, want 1", len(r.calls))
	}
	c := r.calls[0]
	wantSQL := `INSERT INTO "public"."outbox" (event_id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version, payload, headers) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	if c.sql != wantSQL {
		t.Fatalf("sql =\n%s\nwant\n%s", c.sql, wantSQL)
	}
	want := []any{e.EventID.String(), "order", "o-1", int64(2), "order.confirmed", int64(1), `{"id":"o-1"}`, `{"trace_id":"abc"}`}
	if fmt.Sprintf("%#v", c.args) != fmt.Sprintf("%#v", want) {
		t.Fatalf("args = %#v\nwant %#v", c.args, want)
	}
}

func TestAppendKeepsGivenIDAndNullHeaders(t *testing.T) {
	w := NewWriter(testTable)
	r := &recorder{}
	e := validEvent()
	e.Headers = nil
	id := uuid.MustParse("0190a0b0-0000-7000-8000-000000000001")
	e.EventID = id
	if err := w.Append(context.Background(), r, e); err != nil {
		t.Fatal(err)
	}
	if e.EventID != id {
		t.Fatalf("EventID changed to %v", e.EventID)
	}
	args := r.calls[0].args
	if args[0] != id.String() {
		t.Fatalf("event_id arg = %v", args[0])
	}
	if args[7] != nil {
		t.Fatalf("headers arg = %#v, want nil (NULL)", args[7])
	}
}

func TestValidationErrors(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Event)
		want   string
	}{
		{"empty aggregate_type", func(e *Event) { e.AggregateType = "" }, "aggregate_type is empty"},
		{"empty aggregate_id", func(e *Event) { e.AggregateID = "" }, "aggregate_id is empty"},
		{"empty event_type", func(e *Event) { e.EventType = "" }, "event_type is empty"},
		{"zero schema_version", func(e *Event) { e.SchemaVersion = 0 }, "schema_version must be > 0 (got 0)"},
		{"negative schema_version", func(e *Event) { e.SchemaVersion = -3 }, "schema_version must be > 0 (got -3)"},
		{"huge schema_version", func(e *Event) { e.SchemaVersion = 1 << 40 }, "does not fit"},
		{"negative aggregate_version", func(e *Event) { e.AggregateVersion = -1 }, "aggregate_version must not be negative"},
		{"invalid json", func(e *Event) { e.Payload = []byte(`{"a":`) }, "payload is not valid JSON"},
		{"nil payload", func(e *Event) { e.Payload = nil }, "payload is not valid JSON"},
		{"empty header key", func(e *Event) { e.Headers = map[string]string{"": "x"} }, "header key is empty"},
		{"NUL in header", func(e *Event) { e.Headers = map[string]string{"k": "a\x00b"} }, `header "k" value`},
		{"bad utf8 aggregate_id", func(e *Event) { e.AggregateID = "\xff" }, "aggregate_id is not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := NewWriter(testTable)
			r := &recorder{}
			e := validEvent()
			tt.mutate(e)
			err := w.Append(context.Background(), r, e)
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("err = %v, want ErrInvalidEvent", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %T, want *ValidationError", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %q, want it to contain %q", err, tt.want)
			}
			if len(r.calls) != 0 {
				t.Fatal("invalid event was sent to the database")
			}
			if e.EventID != uuid.Nil {
				t.Fatal("invalid event was given an EventID")
			}
		})
	}
}

func TestValidationListsAllProblems(t *testing.T) {
	w := NewWriter(testTable)
	err := w.Validate(&Event{Headers: map[string]string{"": "", "b\x00": "x"}})
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"aggregate_type is empty", "aggregate_id is empty", "event_type is empty",
		"schema_version must be > 0 (got 0)", "payload is not valid JSON",
		"header key \"b\\x00\" is not valid UTF-8 text (or contains NUL)", "header key is empty",
	}
	if strings.Join(ve.Problems, "|") != strings.Join(want, "|") {
		t.Fatalf("Problems =\n%q\nwant\n%q", ve.Problems, want)
	}
	if !strings.HasPrefix(err.Error(), "invalid outbox event: aggregate_type is empty; ") {
		t.Fatalf("Error() = %q", err)
	}
	if err := w.Validate(nil); !errors.Is(err, ErrInvalidEvent) {
		t.Fatalf("Validate(nil) = %v", err)
	}
}

func TestBinaryPayload(t *testing.T) {
	w := NewWriter(testTable, WithBinaryPayload())
	r := &recorder{}
	e := validEvent()
	e.Payload = []byte{0x00, 0xff, 0x10}
	if err := w.Append(context.Background(), r, e); err != nil {
		t.Fatal(err)
	}
	got, ok := r.calls[0].args[6].([]byte)
	if !ok || string(got) != "\x00\xff\x10" {
		t.Fatalf("payload arg = %#v, want the raw bytes", r.calls[0].args[6])
	}

	e = validEvent()
	e.Payload = nil
	if err := w.Append(context.Background(), r, e); err != nil {
		t.Fatal(err)
	}
	if got, ok := r.calls[1].args[6].([]byte); !ok || got == nil {
		t.Fatalf("nil payload arg = %#v, want empty non-nil []byte", r.calls[1].args[6])
	}
}

func TestWithSchema(t *testing.T) {
	w := NewWriter(testTable, WithSchema(migrations.Schema{PayloadType: "text"}))
	r := &recorder{}
	e := validEvent()
	e.Headers = nil
	e.Payload = []byte("plain text, not JSON")
	if err := w.Append(context.Background(), r, e); err != nil {
		t.Fatal(err)
	}
	c := r.calls[0]
	if strings.Contains(c.sql, "headers") || len(c.args) != 7 {
		t.Fatalf("table without headers: sql %q with %d args", c.sql, len(c.args))
	}

	e = validEvent()
	err := w.Append(context.Background(), r, e)
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "no headers column") {
		t.Fatalf("headers on a table without headers column: %v", err)
	}

	w = NewWriter(testTable, WithBinaryPayload(), WithSchema(migrations.Schema{PayloadType: "jsonb", HasHeaders: true}))
	e = validEvent()
	e.Payload = []byte("not json")
	if err := w.Validate(e); err == nil {
		t.Fatal("WithSchema(jsonb) should override WithBinaryPayload and require JSON")
	}
}

func TestAppendWrapsExecError(t *testing.T) {
	dbErr := errors.New("connection reset")
	w := NewWriter(testTable)
	err := w.Append(context.Background(), &recorder{err: dbErr}, validEvent())
	if !errors.Is(err, dbErr) {
		t.Fatalf("err = %v, want it to wrap the Exec error", err)
	}
	if errors.Is(err, ErrInvalidEvent) {
		t.Fatal("database error reported as invalid event")
	}
	if !strings.Contains(err.Error(), "order.confirmed") || !strings.Contains(err.Error(), "public.outbox") {
		t.Fatalf("err = %q lacks context", err)
	}
}

func TestAppendBatch(t *testing.T) {
	w := NewWriter(testTable)
	r := &recorder{}
	events := make([]*Event, 2500)
	for i := range events {
		events[i] = validEvent()
	}
	if err := w.AppendBatch(context.Background(), r, events); err != nil {
		t.Fatal(err)
	}
	if len(r.calls) != 3 {
		t.Fatalf("got %d statements, want 3 (1000+1000+500)", len(r.calls))
	}
	if n := len(r.calls[0].args); n != 8000 {
		t.Fatalf("first statement has %d args, want 8000", n)
	}
	if !strings.HasSuffix(r.calls[0].sql, "$7993, $7994, $7995, $7996, $7997, $7998, $7999, $8000)") {
		t.Fatalf("placeholders misnumbered: ...%s", r.calls[0].sql[len(r.calls[0].sql)-80:])
	}
	if n := len(r.calls[2].args); n != 4000 {
		t.Fatalf("last statement has %d args, want 4000", n)
	}
	seen := map[uuid.UUID]bool{}
	for _, e := range events {
		if e.EventID == uuid.Nil || seen[e.EventID] {
			t.Fatalf("missing or duplicate EventID %v", e.EventID)
		}
		seen[e.EventID] = true
	}
}

func TestAppendBatchAllOrNothing(t *testing.T) {
	w := NewWriter(testTable)
	r := &recorder{}
	events := []*Event{validEvent(), validEvent(), validEvent()}
	events[2].EventType = ""
	err := w.AppendBatch(context.Background(), r, events)
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "event 2 of 3") {
		t.Fatalf("err = %v", err)
	}
	if len(r.calls) != 0 || events[0].EventID != uuid.Nil {
		t.Fatal("batch with an invalid event was partly processed")
	}
	if err := w.AppendBatch(context.Background(), r, nil); err != nil || len(r.calls) != 0 {
		t.Fatalf("empty batch: %v, %d calls", err, len(r.calls))
	}
}

func TestSingleRowSQLMatchesBatchOfOne(t *testing.T) {
	w := NewWriter(migrations.Table{Schema: "app", Name: "order"})
	if w.insert != w.insertSQL(1) || !strings.Contains(w.insert, `"app"."order"`) {
		t.Fatalf("insert = %s", w.insert)
	}
	if w.Table().String() != "app.order" {
		t.Fatalf("Table() = %v", w.Table())
	}
}
