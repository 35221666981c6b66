package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.databaseURL != "postgres://x/y" || cfg.table.String() != "public.outbox" ||
		cfg.duration != 5*time.Second || cfg.workers != 4 || cfg.rate != 50 {
		t.Fatalf("defaults = %+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "")
	for args, want := range map[string]string{
		"":                               "--database-url",
		"--database-url=u --table=a.b.c": "--table",
		"--database-url=u --workers=0":   "--workers",
		"--database-url=u --duration=0s": "--duration",
		"--database-url=u --rate=-1":     "--rate",
		"--database-url=u extra":         "unexpected arguments",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%q) = %v, want error mentioning %s", args, err, want)
		}
	}
}

func TestPayloadSize(t *testing.T) {
	b, err := json.Marshal(orderConfirmed{
		OrderID: "ord-0123abcd-000001", CustomerID: "cust-0042", Status: "confirmed", Version: 2,
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
