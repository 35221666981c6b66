package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// payloadKind is how the payload column stores bytes, which decides both
// validation and the Go type passed to the driver.
type payloadKind int

const (
	// payloadJSON: jsonb or json column; payload must be valid JSON and is
	// sent as a string so every driver and protocol mode treats it as text.
	payloadJSON payloadKind = iota
	// payloadBinary: bytea column; payload is sent as []byte.
	payloadBinary
	// payloadText: text column; payload must be valid UTF-8 without NUL.
	payloadText
)

// WithBinaryPayload declares that the payload column is bytea (see
// migrations.ApplyOptions.PayloadType), so payloads are written as opaque
// bytes and not checked for JSON. Use it for Protobuf, Avro and the like.
// A Writer option.
func WithBinaryPayload() Option {
	return optionFunc(func(o *options) { o.payload = payloadBinary })
}

// WithSchema adapts the Writer to a table as described by
// migrations.Validate: the payload column type picks the payload handling
// (overriding an earlier WithBinaryPayload), and a table without a headers
// column makes events with headers invalid instead of failing in the
// database. A Writer option.
func WithSchema(s migrations.Schema) Option {
	return optionFunc(func(o *options) {
		switch s.PayloadType {
		case "bytea":
			o.payload = payloadBinary
		case "text":
			o.payload = payloadText
		default:
			o.payload = payloadJSON
		}
		o.noHeaders = !s.HasHeaders
	})
}

// Writer appends events to one outbox table. It holds no connection or
// transaction, only the prepared SQL text, so one Writer can be shared by
// all goroutines of an application.
type Writer struct {
	table   migrations.Table
	payload payloadKind
	headers bool
	// prop copies the trace context into headers (trace.go); nil: global.
	prop    propagation.TextMapPropagator
	insert  string // single-row INSERT
	columns string // column list shared by single and batch inserts
	metrics Metrics
	bp      *HealthMonitor // nil: no back-pressure (WithBackpressure)
	checker EventChecker   // nil: events not checked (WithEventCheck)
}

const (
	// columnCountWithHeaders is the number of values per event in an
	// INSERT when the table has a headers column.
	columnCountWithHeaders = 8
	// maxBatchRows caps one multi-row INSERT well below PostgreSQL's
	// 65535 bind parameters and keeps statements a reasonable size.
	maxBatchRows = 1000
)

// NewWriter returns a Writer for table, which must already have the outbox
// schema (see package migrations). By default the payload column is
// assumed to be jsonb or json and the headers column to exist. The
// options of a Writer are WithBinaryPayload, WithSchema, WithBackpressure,
// WithEventCheck, WithMetrics and WithPropagator; WithLogger, a
// HealthMonitor's, changes nothing here (a Writer logs nothing: it
// returns its errors).
func NewWriter(table migrations.Table, opts ...Option) *Writer {
	var o options
	for _, opt := range opts {
		opt.apply(&o)
	}
	w := &Writer{table: table, payload: o.payload, headers: !o.noHeaders, prop: o.propagator, metrics: o.metrics, bp: o.backpressure,
		checker: o.check}
	if w.metrics == nil {
		w.metrics = nopMetrics{}
	}
	cols := []string{
		migrations.ColEventID, migrations.ColAggregateType, migrations.ColAggregateID,
		migrations.ColAggregateVersion, migrations.ColEventType, migrations.ColSchemaVersion,
		migrations.ColPayload,
	}
	if w.headers {
		cols = append(cols, migrations.ColHeaders)
	}
	w.columns = strings.Join(cols, ", ")
	w.insert = w.insertSQL(1)
	return w
}

// Table returns the table the Writer inserts into.
func (w *Writer) Table() migrations.Table { return w.table }

func (w *Writer) perRow() int {
	if w.headers {
		return columnCountWithHeaders
	}
	return columnCountWithHeaders - 1
}

// insertSQL builds an INSERT of n rows with $-numbered placeholders.
func (w *Writer) insertSQL(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO ")
	b.WriteString(w.table.Quoted())
	b.WriteString(" (")
	b.WriteString(w.columns)
	b.WriteString(") VALUES ")
	p := 1
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for j := range w.perRow() {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	return b.String()
}

// Validate reports whether Append would accept e, without writing it. The
// error is a *ValidationError wrapping ErrInvalidEvent. It leaves out the
// event check (WithEventCheck), which may do I/O: the checker's own Check
// does that part.
func (w *Writer) Validate(e *Event) error {
	if e == nil {
		return &ValidationError{Problems: []string{"event is nil"}}
	}
	var p []string
	if e.AggregateType == "" {
		p = append(p, "aggregate_type is empty")
	}
	if e.AggregateID == "" {
		p = append(p, "aggregate_id is empty")
	}
	if e.EventType == "" {
		p = append(p, "event_type is empty")
	}
	for _, f := range []struct{ name, v string }{
		{migrations.ColAggregateType, e.AggregateType},
		{migrations.ColAggregateID, e.AggregateID},
		{migrations.ColEventType, e.EventType},
	} {
		if f.v != "" && !validText(f.v) {
			p = append(p, f.name+" is not valid UTF-8 text (or contains NUL)")
		}
	}
	if e.AggregateVersion < 0 {
		p = append(p, fmt.Sprintf("aggregate_version must not be negative (got %d)", e.AggregateVersion))
	}
	if e.SchemaVersion <= 0 {
		p = append(p, fmt.Sprintf("schema_version must be > 0 (got %d)", e.SchemaVersion))
	} else if int64(e.SchemaVersion) > 1<<31-1 {
		p = append(p, fmt.Sprintf("schema_version %d does not fit in an integer column", e.SchemaVersion))
	}
	switch w.payload {
	case payloadJSON:
		if !json.Valid(e.Payload) {
			p = append(p, "payload is not valid JSON")
		}
	case payloadText:
		if !validText(string(e.Payload)) {
			p = append(p, "payload is not valid UTF-8 text (or contains NUL)")
		}
	}
	if e.Priority != PriorityCritical && e.Priority != PriorityLow {
		p = append(p, fmt.Sprintf("priority %d is unknown (use PriorityCritical or PriorityLow)", int(e.Priority)))
	}
	if len(e.Headers) > 0 && !w.headers {
		p = append(p, "headers given but the outbox table has no headers column")
	}
	var hp []string
	for k, v := range e.Headers {
		if k == "" {
			hp = append(hp, "header key is empty")
			continue
		}
		// Headers are stored as JSON; json.Marshal would silently replace
		// invalid UTF-8, and jsonb rejects \u0000.
		if !validText(k) {
			hp = append(hp, fmt.Sprintf("header key %q is not valid UTF-8 text (or contains NUL)", k))
		}
		if !validText(v) {
			hp = append(hp, fmt.Sprintf("header %q value is not valid UTF-8 text (or contains NUL)", k))
		}
	}
	// Map iteration order is random; keep messages stable.
	slices.Sort(hp)
	p = append(p, hp...)
	if len(p) > 0 {
		return &ValidationError{EventID: e.EventID, Problems: p}
	}
	return nil
}

// validText reports whether s can be stored in a PostgreSQL text or jsonb
// string: valid UTF-8 and no NUL character.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// Append validates e, assigns a UUIDv7 EventID if it has none (writing it
// back into e so the caller can log or return it) and inserts it through
// tx. Call it in the same transaction as the change the event describes;
// it does not commit.
//
// An invalid event is rejected before any SQL is sent with a
// *ValidationError (errors.Is(err, ErrInvalidEvent)); e is left unchanged
// in that case.
//
// With WithBackpressure, an event the monitor refuses (PriorityLow while
// the soft budget is crossed, any event while the hard one is) is
// rejected after validation and before any SQL with a *BackpressureError
// (errors.Is(err, ErrBackpressure)), counted in Metrics, and e is left
// unchanged too. The check is an atomic load, not a query.
//
// With WithEventCheck, the check runs next, before any SQL: an event it
// refuses is rejected with the check's error, unchanged, and e is left
// unchanged too. The schema check of package outboxschema refuses a
// payload the relay could not encode with its registered schema with an
// *outboxschema.SchemaError (errors.Is(err, ErrInvalidEvent)).
func (w *Writer) Append(ctx context.Context, tx Execer, e *Event) error {
	return w.append(ctx, tx, e, true)
}

// append is Append; check false skips the event check, for Transition,
// which ran it before its change.
func (w *Writer) append(ctx context.Context, tx Execer, e *Event, check bool) error {
	if err := w.Validate(e); err != nil {
		return err
	}
	if be := w.admit(e); be != nil {
		return be
	}
	if check {
		if err := w.check(ctx, e); err != nil {
			return err
		}
	}
	if err := assignID(e); err != nil {
		return err
	}
	args, err := w.args(nil, e, w.traceHeaders(ctx))
	if err != nil {
		return err
	}
	if err := tx.Exec(ctx, w.insert, args...); err != nil {
		return fmt.Errorf("append outbox event %s (%s) to %s: %w", e.EventID, e.EventType, w.table, err)
	}
	return nil
}

// AppendBatch appends several events with as few statements as possible
// (multi-row INSERTs of up to 1000 rows), for producers that emit many
// events per transaction. Either every event is valid and all are sent, or
// nothing is sent: validation of all events happens first, and the error
// for the first invalid one says which it was and wraps its
// *ValidationError. Like Append, it fills missing EventIDs.
//
// With WithBackpressure, the batch is refused as a whole, before any SQL,
// if back-pressure refuses any of its events: the error wraps the first
// refused event's *BackpressureError (errors.Is(err, ErrBackpressure)).
// Every refused event is counted in Metrics; the batch's other events are
// not written either, but they were not refused, so they are not counted.
// Put critical and non-critical events in separate batches if the
// critical ones must go through while the soft budget is crossed.
//
// With WithEventCheck, every event is checked after that, before any
// SQL, and the error for the first refused one says which it was and
// wraps the check's error; nothing is sent.
func (w *Writer) AppendBatch(ctx context.Context, tx Execer, events []*Event) error {
	for i, e := range events {
		if err := w.Validate(e); err != nil {
			return fmt.Errorf("event %d of %d: %w", i, len(events), err)
		}
	}
	if w.bp != nil {
		var first error
		for i, e := range events {
			if be := w.admit(e); be != nil && first == nil {
				first = fmt.Errorf("event %d of %d (%s, %s): batch refused: %w", i, len(events), e.EventType, e.Priority, be)
			}
		}
		if first != nil {
			return first
		}
	}
	if w.checker != nil {
		for i, e := range events {
			if err := w.checker.Check(ctx, e); err != nil {
				return fmt.Errorf("event %d of %d: %w", i, len(events), err)
			}
		}
	}
	for _, e := range events {
		if err := assignID(e); err != nil {
			return err
		}
	}
	th := w.traceHeaders(ctx)
	for start := 0; start < len(events); start += maxBatchRows {
		chunk := events[start:min(start+maxBatchRows, len(events))]
		args := make([]any, 0, len(chunk)*w.perRow())
		for _, e := range chunk {
			var err error
			if args, err = w.args(args, e, th); err != nil {
				return err
			}
		}
		sql := w.insert
		if len(chunk) > 1 {
			sql = w.insertSQL(len(chunk))
		}
		if err := tx.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("append %d outbox events to %s: %w", len(chunk), w.table, err)
		}
	}
	return nil
}

func assignID(e *Event) error {
	if e.EventID != uuid.Nil {
		return nil
	}
	id, err := uuid.NewV7()
	if err != nil {
		return fmt.Errorf("generate event id: %w", err)
	}
	e.EventID = id
	return nil
}

// args appends e's bind values to dst, with the trace headers th added to
// e's own (trace.go). Every value is a plain Go string,
// int64 or []byte (or nil for SQL NULL) so pgx in any query exec mode,
// including the simple protocol, and database/sql drivers all encode it
// the same way; the server infers each parameter's type from the target
// column.
func (w *Writer) args(dst []any, e *Event, th map[string]string) ([]any, error) {
	var payload any
	switch w.payload {
	case payloadBinary:
		b := e.Payload
		if b == nil {
			b = []byte{} // nil would be NULL and violate NOT NULL
		}
		payload = b
	default:
		payload = string(e.Payload)
	}
	dst = append(dst,
		e.EventID.String(),
		e.AggregateType,
		e.AggregateID,
		e.AggregateVersion,
		e.EventType,
		int64(e.SchemaVersion),
		payload,
	)
	if w.headers {
		var headers any // NULL when there are none
		if h := withTrace(e.Headers, th); len(h) > 0 {
			b, err := json.Marshal(h)
			if err != nil {
				return nil, fmt.Errorf("encode headers of event %s: %w", e.EventID, err)
			}
			headers = string(b)
		}
		dst = append(dst, headers)
	}
	return dst, nil
}
