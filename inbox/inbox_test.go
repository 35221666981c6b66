package inbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// TestDecodeErrorIdentity: records that are not outbox events are
// recognized (isDecodeError) and get stable ids (recordID).
func TestDecodeErrorIdentity(t *testing.T) {
	_, err := record.Decode(kafka.Message{Key: []byte("k")})
	if !isDecodeError(err) || isDecodeError(errors.New("x")) {
		t.Fatalf("isDecodeError(%v)", err)
	}
	if a, b := recordID("t", 1, 2), recordID("t", 1, 2); a != b || a == recordID("t", 1, 3) {
		t.Error("recordID must be deterministic and distinct")
	}
}

func TestParseRecordFormat(t *testing.T) {
	for in, want := range map[record.Format]record.Format{"": "", "auto": "", "native": record.FormatNative, "cloudevents": record.FormatCloudEvents,
		"avro": record.FormatAvro, "protobuf": record.FormatProtobuf, "json-schema": record.FormatJSONSchema} {
		if got, err := parseRecordFormat(in); err != nil || got != want {
			t.Errorf("parseRecordFormat(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := parseRecordFormat("xml"); err == nil || err.Error() != `record format "xml": use native, debezium, cloudevents, avro, protobuf, json-schema or auto` {
		t.Fatalf("xml: %v", err)
	}
}

func TestCheckRetention(t *testing.T) {
	for _, c := range []struct {
		ret, win time.Duration
		ok       bool
	}{
		{0, 0, true}, {0, time.Hour, true}, {48 * time.Hour, 24 * time.Hour, true}, {24 * time.Hour, 24 * time.Hour, true},
		{time.Hour, 24 * time.Hour, false}, {time.Hour, 0, false},
		// A negative retention is off, like 0; a negative window is an error.
		{-1, 0, true}, {-time.Hour, 24 * time.Hour, true}, {0, -1, false}, {-1, -1, false}, {time.Hour, -1, false},
	} {
		err := CheckRetention(c.ret, c.win)
		if (err == nil) != c.ok {
			t.Errorf("CheckRetention(%s, %s) = %v", c.ret, c.win, err)
		}
	}
}

// testPool is a pool that is never used: pgxpool connects lazily.
var testPool = func() *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig("postgres://127.0.0.1:1/x?pool_max_conns=7")
	if err != nil {
		panic(err)
	}
	p, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		panic(err)
	}
	return p
}()

func validConfig() Config {
	return Config{Name: "shipping", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Pool: testPool,
		Handler: func(context.Context, pgx.Tx, *record.Event) error { return nil }}
}

func TestNewValidates(t *testing.T) {
	c, err := New(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.GroupID != "shipping" || c.cfg.Policy != poison.Quarantine || c.cfg.Schema != "public" || c.cfg.StartOffset != kafka.FirstOffset ||
		c.cfg.BatchSize != 500 || c.cfg.BatchLinger != 5*time.Millisecond || c.cfg.Concurrency != 7 || cap(c.sem) != 7 {
		t.Fatalf("defaults: %+v", c.cfg)
	}
	both := validConfig()
	both.BatchHandler = func(context.Context, pgx.Tx, []*record.Event) error { return nil }
	if _, err := New(both); err == nil || !strings.Contains(err.Error(), "exactly one of Handler and BatchHandler") {
		t.Fatalf("Handler and BatchHandler: %v", err)
	}
	both.Handler = nil
	if _, err := New(both); err != nil {
		t.Fatalf("BatchHandler alone: %v", err)
	}
	for _, mod := range []func(*Config){
		func(c *Config) { c.BatchSize = -1 },
		func(c *Config) { c.BatchSize = maxBatchSize + 1 },
		func(c *Config) { c.Concurrency = -2 },
		func(c *Config) { c.BatchLinger = -time.Second },
	} {
		cfg := validConfig()
		mod(&cfg)
		if _, err := New(cfg); err == nil {
			t.Errorf("New accepted %+v", cfg)
		}
	}
	bad := validConfig()
	bad.Name, bad.Topics, bad.Handler, bad.Schema, bad.Policy = "", nil, nil, "Bad-Schema", "sometimes"
	bad.Retention = time.Hour
	bad.ReplayWindow = 2 * time.Hour
	_, err = New(bad)
	for _, want := range []string{"Name: is required", "Topics", "Handler", "Schema", `policy "sometimes"`, "shorter than ReplayWindow"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: want %q in %v", want, err)
		}
	}
	// One *FieldError per problem, as relay's Validate reports them.
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *FieldError", e)
		}
		fields = append(fields, fe.Field)
	}
	if want := "Name Topics Handler Schema Policy Retention"; strings.Join(fields, " ") != want {
		t.Errorf("fields %v, want %s", fields, want)
	}
	if bad.Validate() == nil {
		t.Error("Validate accepted what New refuses")
	}
}

// TestNegativeTurnsOff: a negative Retention is off (no pruning, like 0)
// and a negative ShutdownTimeout turns the grace off; neither is replaced
// by a default.
func TestNegativeTurnsOff(t *testing.T) {
	cfg := validConfig()
	cfg.Retention, cfg.ShutdownTimeout = -1, -1
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.cfg.Retention != -1 || c.cfg.ShutdownTimeout != -1 {
		t.Fatalf("Retention %s, ShutdownTimeout %s: want both kept at -1ns", c.cfg.Retention, c.cfg.ShutdownTimeout)
	}
	if n, err := c.Prune(context.Background()); n != 0 || err != nil { // testPool would fail a query
		t.Fatalf("Prune without a retention = %d, %v", n, err)
	}
}

func TestBackoff(t *testing.T) {
	c, _ := New(validConfig())
	for attempt := 1; attempt < 20; attempt++ {
		d := c.backoff(attempt)
		if d <= 0 || d > c.cfg.BackoffMax {
			t.Fatalf("backoff(%d) = %s", attempt, d)
		}
	}
}

func TestExpectRows(t *testing.T) {
	if err := ExpectRows(pgconn.NewCommandTag("UPDATE 1"), 1); err != nil {
		t.Fatal(err)
	}
	err := ExpectRows(pgconn.NewCommandTag("UPDATE 0"), 1)
	if !errors.Is(err, ErrExpectation) || !poison.IsPermanent(err) {
		t.Fatalf("ExpectRows mismatch: %v", err)
	}
	if poison.Permanent(nil) != nil || poison.IsPermanent(errors.New("x")) {
		t.Fatal("Permanent")
	}
}

func TestTransientPG(t *testing.T) {
	for code, want := range map[string]bool{"40001": true, "40P01": true, "08006": true, "57P01": true, "53300": true, "23505": false, "42P01": false} {
		if got := isTransientPG(&pgconn.PgError{Code: code}); got != want {
			t.Errorf("%s: %v", code, got)
		}
	}
}

type captureExec struct {
	sql  string
	args []any
}

func (c *captureExec) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.NewCommandTag("INSERT 0 1"), nil
}

func TestApplyNewerSQL(t *testing.T) {
	var db captureExec
	ok, err := ApplyNewer(context.Background(), &db, Projection{Table: "app.order_view", KeyColumn: "order_id", VersionColumn: "version"},
		&record.Event{AggregateID: "o1", AggregateVersion: 4}, map[string]any{"status": "confirmed", "amount": 12})
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	want := `INSERT INTO "app"."order_view" AS t ("order_id", "version", "amount", "status") VALUES ($1, $2, $3, $4) ON CONFLICT ("order_id") DO UPDATE SET "version" = EXCLUDED."version", "amount" = EXCLUDED."amount", "status" = EXCLUDED."status" WHERE t."version" < EXCLUDED."version"`
	if db.sql != want {
		t.Fatalf("sql:\n%s\nwant\n%s", db.sql, want)
	}
	if _, err := ApplyNewer(context.Background(), &db, Projection{Table: "x; drop", KeyColumn: "k", VersionColumn: "v"}, &record.Event{}, nil); err == nil {
		t.Fatal("bad table accepted")
	}
}
