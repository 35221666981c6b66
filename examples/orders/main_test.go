package main

import (
	"context"
	"encoding/json"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
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
		"--database-url=u extra": "unexpected arguments",
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
