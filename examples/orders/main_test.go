package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/record"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.databaseURL != "postgres://x/y" || cfg.table.String() != "public.outbox" ||
		cfg.duration != 5*time.Second || cfg.workers != 4 || cfg.rate != 50 ||
		cfg.viewRate != 20 || cfg.progress != 5*time.Second {
		t.Fatalf("defaults = %+v", cfg)
	}
	if cfg.bp.enabled() || cfg.bp.slot != "outbox_relay" || cfg.bp.interval != 5*time.Second {
		t.Fatalf("back-pressure defaults = %+v, want off, slot outbox_relay, 5s", cfg.bp)
	}
}

func TestParseFlagsBackpressure(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_SLOT", "demo_slot")
	cfg, err := parseFlags(strings.Fields("--view-rate 100 --backpressure-max-retained-wal 64MiB "+
		"--backpressure-min-forecast 2h --backpressure-max-oldest-event 10m --backpressure-disk-budget 1GB --backpressure-interval 1s"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := backpressureConfig{slot: "demo_slot", interval: time.Second, maxRetainedWAL: 64 << 20,
		minForecast: 2 * time.Hour, maxOldestEvent: 10 * time.Minute, diskBudget: 1e9}
	if cfg.bp != want || !cfg.bp.enabled() || cfg.viewRate != 100 {
		t.Fatalf("bp = %+v, want %+v", cfg.bp, want)
	}
	if got := budgetString(cfg.bp); got != "retained WAL > 64.0 MiB or forecast < 2h0m0s or oldest event > 10m0s" {
		t.Fatalf("budgetString = %q", got)
	}
	for _, tc := range []struct {
		in   string
		want int64
	}{{"1048576", 1 << 20}, {"512KiB", 512 << 10}, {"2 GiB", 2 << 30}, {"10MB", 10e6}, {"0", 0}, {"7b", 7}} {
		var n int64
		if err := (sizeFlag{&n}).Set(tc.in); err != nil || n != tc.want {
			t.Errorf("size %q = %d, %v; want %d", tc.in, n, err, tc.want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5GiB", "ten", "64XB", "9999999999GiB"} {
		var n int64
		if err := (sizeFlag{&n}).Set(bad); err == nil {
			t.Errorf("size %q accepted as %d", bad, n)
		}
	}
}

func TestParseFlagsErrors(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "")
	for args, want := range map[string]string{
		"":                                                      "--database-url",
		"--database-url=u --table=a.b.c":                        "--table",
		"--database-url=u --workers=0":                          "--workers",
		"--database-url=u --duration=0s":                        "--duration",
		"--database-url=u --rate=-1":                            "--rate",
		"--database-url=u --view-rate=-1":                       "--view-rate",
		"--database-url=u --progress=-1s":                       "--progress",
		"--database-url=u --backpressure-min-forecast=-1s":      "--backpressure-min-forecast",
		"--database-url=u --backpressure-interval=0s":           "--backpressure-interval",
		"--database-url=u --backpressure-max-retained-wal=lots": "not a size",
		"--database-url=u --backpressure-max-retained-wal=1MiB --backpressure-slot=": "--backpressure-slot",
		"--database-url=u extra":                                                      "unexpected arguments",
		"--database-url=u --record-format=protobuf":                                   "use native or avro",
		"--database-url=u --record-format=avro --schema-registry-url=":                "--schema-registry-url",
		"--database-url=u --record-format=avro --schema-registry-url=r --view-rate=5": "--view-rate must be 0",
		"--database-url=u --bad-order":                                                "--bad-order needs --record-format avro",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%q) = %v, want error mentioning %s", args, err, want)
		}
	}
}

func TestPayloadSize(t *testing.T) {
	b, err := json.Marshal(orderConfirmed{
		OrderID: "ord-0123abcd-000001", CustomerID: "cust-0042", Status: "confirmed",
		AmountCents: 12345, Currency: "EUR",
		Items:       []item{{SKU: "sku-1042", Quantity: 1}, {SKU: "sku-2210", Quantity: 2}},
		ConfirmedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 150 || len(b) > 260 {
		t.Fatalf("payload is %d bytes, want about 200: %s", len(b), b)
	}
	if id := newTraceID(); len(id) != 32 {
		t.Fatalf("trace id %q", id)
	}
}

// TestProduceAgainstStack runs the example against the local stack, in a
// schema of its own: without back-pressure every view is written; with a
// soft budget of 1 byte of retained WAL on a slot nobody consumes, every
// view is refused while every confirmation still goes through, and the
// final line counts them.
func TestProduceAgainstStack(t *testing.T) {
	sc := testenv.Reserve(t)
	table := migrations.Table{Schema: sc.Schema, Name: "outbox"}
	// The slot first: the set-up's own WAL already crosses the 1-byte budget.
	slot := sc.Schema // unique: t_<hex>
	if _, err := sc.Pool.Exec(sc.Ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := sc.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot); err != nil {
			t.Errorf("drop slot %s: %v", slot, err)
		}
	})
	if _, err := sc.Pool.Exec(sc.Ctx, "CREATE SCHEMA "+pgx.Identifier{sc.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(sc.Ctx, sc.Pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	url := testenv.DatabaseURL(t)
	finalLine := regexp.MustCompile(`orders confirmed (\d+), events written (\d+) .*; views written (\d+), views refused (\d+) \(back-pressure\)`)
	for _, tc := range []struct {
		name    string
		args    string
		refused bool
	}{
		{"no back-pressure", "", false},
		{"budget crossed", "--backpressure-slot " + slot + " --backpressure-max-retained-wal 1 --backpressure-interval 1s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs strings.Builder
			args := strings.Fields("--database-url " + url + " --table " + table.String() +
				" --duration 1500ms --workers 2 --rate 40 --view-rate 40 --progress 500ms " + tc.args)
			if rc := run(args, &out, &errs); rc != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", rc, out.String(), errs.String())
			}
			m := finalLine.FindStringSubmatch(out.String())
			if m == nil {
				t.Fatalf("no final line in:\n%s", out.String())
			}
			confirmed, _ := strconv.Atoi(m[1])
			views, _ := strconv.Atoi(m[3])
			refused, _ := strconv.Atoi(m[4])
			if confirmed == 0 || m[1] != m[2] {
				t.Errorf("confirmed %s, events written %s: want equal and positive", m[1], m[2])
			}
			if tc.refused && (views != 0 || refused == 0) {
				t.Errorf("budget crossed: views written %d, refused %d; want 0 and some", views, refused)
			}
			if !tc.refused && (views == 0 || refused != 0) {
				t.Errorf("no back-pressure: views written %d, refused %d; want some and 0", views, refused)
			}
			if tc.refused && !strings.Contains(out.String(), "back-pressure ENGAGED") {
				t.Errorf("no progress line shows back-pressure engaged:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "no event written, conflict counted") {
				t.Errorf("the second confirmation is not reported:\n%s", out.String())
			}
			t.Logf("%s: %s", tc.name, m[0])
		})
	}
}

// TestProduceAvroAgainstStack runs the example with --record-format avro
// against the local stack and its registry, on a topic (so a subject) of
// its own: it registers the order.confirmed schema as version 1, every
// confirmation passes the check and is written, and the bad order is
// refused before commit with the *outboxschema.SchemaError naming
// amount_cents, leaving the order pending and the outbox without its
// event. A second run finds the schema registered already.
func TestProduceAvroAgainstStack(t *testing.T) {
	reg := os.Getenv("TEST_SCHEMA_REGISTRY_URL")
	if reg == "" {
		t.Skip("TEST_SCHEMA_REGISTRY_URL not set: run `eval \"$(scripts/stack.sh env)\"` to run this test against the stack's registry")
	}
	sc := testenv.Reserve(t)
	table := migrations.Table{Schema: sc.Schema, Name: "outbox"}
	if _, err := sc.Pool.Exec(sc.Ctx, "CREATE SCHEMA "+pgx.Identifier{sc.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(sc.Ctx, sc.Pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	topicTemplate := "examples." + sc.Schema + ".{aggregate_type}"
	subject := "examples." + sc.Schema + ".order-value"
	finalLine := regexp.MustCompile(`orders confirmed (\d+), events written (\d+) .*; events in \S+ for this run (\d+); views written 0,`)
	for run1 := range 2 {
		var out, errs strings.Builder
		args := strings.Fields("--database-url " + testenv.DatabaseURL(t) + " --table " + table.String() +
			" --duration 1s --workers 2 --rate 20 --progress 0 --record-format avro --bad-order" +
			" --schema-registry-url " + reg + " --topic-template " + topicTemplate)
		if rc := run(args, &out, &errs); rc != 0 {
			t.Fatalf("run %d: exit %d\nstdout:\n%s\nstderr:\n%s", run1+1, rc, out.String(), errs.String())
		}
		o := out.String()
		if !strings.Contains(o, "registered the Avro schema of order.confirmed as subject "+subject+" version 1 (schema id ") {
			t.Errorf("run %d: no registration line for %s:\n%s", run1+1, subject, o)
		}
		m := finalLine.FindStringSubmatch(o)
		if m == nil || m[1] == "0" || m[1] != m[2] || m[2] != m[3] {
			t.Fatalf("run %d: final line %q: want confirmed = written = stored > 0, no views:\n%s", run1+1, m, o)
		}
		refused := regexp.MustCompile(`order (\S+) refused before commit: \*outboxschema\.SchemaError, Field "amount_cents", ` +
			`errors\.Is\(err, outbox\.ErrInvalidEvent\) true:\n .* subject ` + regexp.QuoteMeta(subject) + ` version 1 \(schema id \d+\): .*amount_cents`).FindStringSubmatch(o)
		if refused == nil || !strings.Contains(o, "order "+refused[1]+" is still pending, and the outbox holds no event of it") {
			t.Fatalf("run %d: the bad order's refusal is not reported:\n%s", run1+1, o)
		}
		t.Logf("run %d: %s", run1+1, refused[0])
	}
	var bad int
	if err := sc.Pool.QueryRow(sc.Ctx, `SELECT count(*) FROM `+table.Quoted()+` WHERE payload->>'amount_cents' LIKE '%.%'`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Errorf("%d events with a decimal-string amount_cents in the outbox", bad)
	}
}

func TestParseFlagsAvro(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL", "")
	t.Setenv("OUTBOX_RELAY_TOPIC_TEMPLATE", "")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.recordFormat != record.FormatNative || cfg.badOrder || cfg.topicTemplate != publisher.DefaultTopicTemplate {
		t.Fatalf("defaults = %+v, want native, no bad order, the relay's topic template", cfg)
	}
	t.Setenv("OUTBOX_RELAY_SCHEMA_REGISTRY_URL", "http://r/apis/ccompat/v7")
	t.Setenv("OUTBOX_RELAY_TOPIC_TEMPLATE", "shop.{aggregate_type}")
	cfg, err = parseFlags(strings.Fields("--record-format avro --bad-order --view-rate 0"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.recordFormat != record.FormatAvro || !cfg.badOrder || cfg.viewRate != 0 ||
		cfg.registryURL != "http://r/apis/ccompat/v7" || cfg.topicTemplate != "shop.{aggregate_type}" {
		t.Fatalf("cfg = %+v", cfg)
	}
	// The views' default rate is dropped, not refused: they would share the subject.
	if cfg, err = parseFlags(strings.Fields("--record-format avro"), io.Discard); err != nil || cfg.viewRate != 0 {
		t.Fatalf("avro without --view-rate: view rate %g, %v; want 0", cfg.viewRate, err)
	}
}

// TestRegisterSchemaVersion: the schema registered must be the version
// the events name; a subject whose version 1 is another schema, or that
// has no version 1, is an error that says what to do, and a user:password
// in the URL goes as basic auth, not into the error.
func TestRegisterSchemaVersion(t *testing.T) {
	for _, tc := range []struct {
		name      string
		versionID int // id of version 1; 0 = no version 1
		want      string
	}{
		{"registered as version 1", 7, ""},
		{"version 1 is another schema", 3, "version 1 is schema id 3, not this example's (schema id 7)"},
		{"no version 1", 0, "the subject has no version 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if u, p, ok := r.BasicAuth(); !ok || u != "key" || p != "secret" {
					http.Error(w, `{"error_code":40101}`, http.StatusUnauthorized)
					return
				}
				switch {
				case r.Method == http.MethodPost && r.URL.Path == "/subjects/shop.order-value/versions":
					fmt.Fprint(w, `{"id":7}`)
				case r.Method == http.MethodGet && r.URL.Path == "/subjects/shop.order-value/versions/1" && tc.versionID > 0:
					fmt.Fprintf(w, `{"subject":"shop.order-value","version":1,"id":%d}`, tc.versionID)
				default:
					http.Error(w, `{"error_code":40402,"message":"Version not found"}`, http.StatusNotFound)
				}
			}))
			defer srv.Close()
			base := strings.Replace(srv.URL, "http://", "http://key:secret@", 1)
			id, err := registerSchema(context.Background(), base, "shop.order-value", orderConfirmedAvro, 1)
			switch {
			case tc.want == "" && (err != nil || id != 7):
				t.Fatalf("registerSchema = %d, %v; want 7", id, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("registerSchema = %d, %v; want an error with %q", id, err, tc.want)
			case err != nil && strings.Contains(err.Error(), "secret"):
				t.Fatalf("the error carries the password: %v", err)
			}
		})
	}
}
