package inbox

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestNewDefaults: a Config with only the required fields gets every
// default, field by field, and so do the options: no logs, no metrics,
// the global tracer provider and propagator.
func TestNewDefaults(t *testing.T) {
	c, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	got := c.cfg
	if got.Handler == nil {
		t.Fatal("Handler lost")
	}
	got.Handler = nil // funcs do not compare
	want := Config{
		Name: "shipping", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Pool: testPool,
		GroupID:         "shipping",
		Schema:          "public",
		Policy:          poison.Quarantine,
		BatchSize:       500,
		BatchLinger:     5 * time.Millisecond,
		Concurrency:     7, // the pool's MaxConns
		MaxAttempts:     5,
		BackoffBase:     100 * time.Millisecond,
		BackoffMax:      5 * time.Second,
		CommitInterval:  time.Second,
		CommitBatch:     1000,
		Retention:       0, // keep processed_events forever
		ReplayWindow:    0,
		PruneInterval:   time.Hour,
		StartOffset:     kafka.FirstOffset,
		ShutdownTimeout: 10 * time.Second,
		RecordFormat:    "",                                                                         // detected per record
		Schemas:         SchemaConfig{SubjectStrategy: record.SubjectTopic, PayloadAs: PayloadJSON}, // no registry: framed values raw
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults:\n got %+v\nwant %+v", got, want)
	}
	if cap(c.sem) != 7 {
		t.Errorf("%d transactions at a time, want Concurrency's 7", cap(c.sem))
	}
	if c.log.Handler() != slog.DiscardHandler {
		t.Errorf("default logger %T, want one that discards", c.log.Handler())
	}
	if c.m.m != (nopMetrics{}) || c.m.bm != nil || c.m.name != "shipping" {
		t.Errorf("default metrics %+v, want none", c.m)
	}
	if c.tr.tracer == nil || c.tr.prop != nil || c.tr.group != "shipping" {
		t.Errorf("default tracing %+v, want the global provider's tracer and the global propagator", c.tr)
	}
}

// records is a slog.Handler that keeps every record with its attributes
// (those of With too).
type records struct {
	mu    *sync.Mutex
	attrs []slog.Attr
	out   *[]map[string]string
	grew  *chan struct{} // closed (and replaced) when a record is added
}

func newRecords() *records {
	grew := make(chan struct{})
	return &records{mu: &sync.Mutex{}, out: &[]map[string]string{}, grew: &grew}
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	m := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
	for _, a := range r.attrs {
		m[a.Key] = a.Value.String()
	}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.out = append(*r.out, m)
	close(*r.grew)
	*r.grew = make(chan struct{})
	return nil
}
func (r *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &records{mu: r.mu, attrs: append(append([]slog.Attr(nil), r.attrs...), as...), out: r.out, grew: r.grew}
}
func (r *records) WithGroup(string) slog.Handler { return r }

// find returns the first record with message msg.
func (r *records) find(msg string) map[string]string {
	m, _ := r.findOrWait(msg)
	return m
}

// findOrWait is find, and when there is no such record, a channel closed
// when the next record is added.
func (r *records) findOrWait(msg string) (map[string]string, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range *r.out {
		if m["msg"] == msg {
			return m, nil
		}
	}
	return nil, *r.grew
}

// await returns the first record with message msg once there is one, or
// nil when timeout passes first.
func (r *records) await(msg string, timeout time.Duration) map[string]string {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		m, grew := r.findOrWait(msg)
		if m != nil {
			return m
		}
		select {
		case <-grew:
		case <-deadline.C:
			return nil
		}
	}
}

// TestWithLogger: the logger of WithLogger receives the consumer's lines,
// with its name: Run's start line here (no broker listens, so the group
// never joins; cancelling Run ends it).
func TestWithLogger(t *testing.T) {
	logs := newRecords()
	c, err := New(validConfig(), WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	logs.await("inbox consumer started", 10*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	start := logs.find("inbox consumer started")
	if start == nil || start["consumer"] != "shipping" || start["stage"] != "start" || start["group"] != "shipping" || start["level"] != "INFO" {
		t.Fatalf("start line %v, want one of consumer shipping, stage start", start)
	}
	if logs.find("inbox consumer stopped") == nil {
		t.Error("no stop line")
	}
}

// metricsRecorder is a Metrics and BatchMetrics that counts calls.
type metricsRecorder struct {
	mu    sync.Mutex
	calls map[string]int // "method consumer [reason]"
}

func (m *metricsRecorder) add(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.calls == nil {
		m.calls = map[string]int{}
	}
	m.calls[k]++
}

func (m *metricsRecorder) count(k string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[k]
}

func (m *metricsRecorder) Applied(c string)                       { m.add("applied " + c) }
func (m *metricsRecorder) Duplicate(c string)                     { m.add("duplicate " + c) }
func (m *metricsRecorder) Parked(c string)                        { m.add("parked " + c) }
func (m *metricsRecorder) DeadLettered(c string)                  { m.add("dead " + c) }
func (m *metricsRecorder) Error(c, reason string)                 { m.add("error " + c + " " + reason) }
func (m *metricsRecorder) OffsetCommit(c string, _ time.Duration) { m.add("commit " + c) }
func (m *metricsRecorder) Pruned(c string, _ int64)               { m.add("pruned " + c) }
func (m *metricsRecorder) Processed(c string, _ time.Duration, _ time.Time) {
	m.add("processed " + c)
}
func (m *metricsRecorder) Lag(c, _ string, _ int, _ int64)        { m.add("lag " + c) }
func (m *metricsRecorder) Batch(c string, _ int, _ time.Duration) { m.add("batch " + c) }

// TestWithMetrics: the Metrics of WithMetrics is called with the
// consumer's name: a record that is not an outbox event counts a decode
// error (under halt, so that nothing needs the database).
func TestWithMetrics(t *testing.T) {
	met := &metricsRecorder{}
	cfg := validConfig()
	cfg.Policy = poison.Halt
	c, err := New(cfg, WithMetrics(met))
	if err != nil {
		t.Fatal(err)
	}
	bad := kafka.Message{Topic: "t", Offset: 7, Key: []byte("x"), Value: []byte("?")}
	if _, err := c.applyRecords(context.Background(), context.Background(), []kafka.Message{bad}); err == nil {
		t.Fatal("applyRecords: want the halt")
	}
	if n := met.count("error shipping decode"); n != 1 {
		t.Fatalf("metrics %v, want one decode error of consumer shipping", met.calls)
	}
}

// TestWithMetricsOnPostgres: applied events, duplicates and batches reach
// the Metrics of WithMetrics (a BatchMetrics too).
func TestWithMetricsOnPostgres(t *testing.T) {
	r := newBatchRig(t)
	met := &metricsRecorder{}
	c := r.consumer(nil, WithMetrics(met))
	msgs, _ := script()
	if done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs); err != nil || done != len(msgs) {
		t.Fatalf("applyRecords = %d, %v", done, err)
	}
	st := c.Stats()
	if met.count("applied c") != int(st.Applied) || met.count("duplicate c") != int(st.Duplicates) ||
		met.count("batch c") != int(st.Batches) || met.count("processed c") != len(msgs) || st.Applied == 0 {
		t.Fatalf("metrics %v, stats %+v: want them to agree", met.calls, st)
	}
}

// TestOptionsApplyInOrder: a later option of the same kind wins, nil
// included (the default again).
func TestOptionsApplyInOrder(t *testing.T) {
	logs := newRecords()
	c, err := New(validConfig(), WithLogger(slog.New(logs)), WithLogger(nil), WithMetrics(&metricsRecorder{}), WithMetrics(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.log.Handler() != slog.DiscardHandler || c.m.m != (nopMetrics{}) {
		t.Fatalf("logger %T, metrics %T: want the defaults", c.log.Handler(), c.m.m)
	}
}
