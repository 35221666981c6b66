package main

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/relay"
)

// clearEnv empties every variable parseFlags reads.
func clearEnv(t *testing.T) {
	for _, name := range []string{"DATABASE_URL", "KAFKA_BROKERS", "TABLE", "SLOT", "PUBLICATION", "TOPIC_TEMPLATE"} {
		t.Setenv("OUTBOX_RELAY_"+name, "")
	}
}

func TestParseFlagsDefaults(t *testing.T) {
	clearEnv(t)
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://x/y")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", " k1:9092, k2:9092 ,")
	cfg, err := parseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d := relay.DefaultConfig()
	db := cfg.relay.Database
	if cfg.addr != "127.0.0.1:8080" || cfg.logLevel != slog.LevelInfo || cfg.table.String() != "public.outbox" ||
		db.URL != "postgres://x/y" || db.Table != d.Database.Table || db.Slot != d.Database.Slot ||
		db.Publication != d.Database.Publication || cfg.relay.Publish.TopicTemplate != d.Publish.TopicTemplate ||
		strings.Join(cfg.relay.Kafka.Brokers, ",") != "k1:9092,k2:9092" {
		t.Fatalf("defaults = %+v", cfg)
	}
	// Everything else is the relay's default, but topics are created.
	if !cfg.relay.Publish.CreateTopics || cfg.relay.Leader != d.Leader || cfg.relay.ShutdownTimeout != d.ShutdownTimeout {
		t.Fatalf("relay config = %+v", cfg.relay)
	}
}

func TestParseFlagsEnvAndFlags(t *testing.T) {
	clearEnv(t)
	t.Setenv("OUTBOX_RELAY_DATABASE_URL", "postgres://env/db")
	t.Setenv("OUTBOX_RELAY_KAFKA_BROKERS", "env:9092")
	t.Setenv("OUTBOX_RELAY_TABLE", "shop.outbox")
	t.Setenv("OUTBOX_RELAY_SLOT", "shop")
	t.Setenv("OUTBOX_RELAY_PUBLICATION", "shop_pub")
	t.Setenv("OUTBOX_RELAY_TOPIC_TEMPLATE", "shop.{aggregate_type}")
	cfg, err := parseFlags([]string{"--addr", ":9000", "--kafka-brokers", "flag:9092", "--log-level", "debug"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	db := cfg.relay.Database
	if cfg.addr != ":9000" || cfg.logLevel != slog.LevelDebug || db.URL != "postgres://env/db" ||
		cfg.relay.Kafka.Brokers[0] != "flag:9092" || len(cfg.relay.Kafka.Brokers) != 1 ||
		db.Table != "shop.outbox" || cfg.table.Schema != "shop" || cfg.table.Name != "outbox" ||
		db.Slot != "shop" || db.Publication != "shop_pub" || cfg.relay.Publish.TopicTemplate != "shop.{aggregate_type}" {
		t.Fatalf("cfg = %+v", cfg)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	clearEnv(t)
	for args, want := range map[string]string{
		"":                 "--database-url: is required\n--kafka-brokers: is required",
		"--database-url=u": "--kafka-brokers: is required",
		"--database-url=u --kafka-brokers=k --table=a.b.c":             "--table",
		"--database-url=u --kafka-brokers=k --slot=Bad-Slot":           "--slot",
		"--database-url=u --kafka-brokers=k --topic-template=x.{nope}": "--topic-template",
		"--database-url=u --kafka-brokers=k --log-level=loud":          "--log-level",
		"--database-url=u --kafka-brokers=k extra":                     "unexpected arguments",
	} {
		_, err := parseFlags(strings.Fields(args), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%q) = %v, want error containing %q", args, err, want)
		}
	}
}

func TestValidID(t *testing.T) {
	for id, want := range map[string]bool{
		"": true, "ord-1": true, "A.b_C-9": true, strings.Repeat("x", 64): true,
		strings.Repeat("x", 65): false, "a/b": false, "a b": false, "é": false, "a?b": false,
	} {
		if got := validID(id); got != want {
			t.Errorf("validID(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestTraceID(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/orders", nil)
	r.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	if got := traceID(r); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("continued trace id = %q", got)
	}
	r.Header.Set("traceparent", "00-not-hex-01")
	if got := traceID(r); len(got) != 32 || got == traceID(r) {
		t.Errorf("new trace ids %q: want 32 random hex digits", got)
	}
}

// A bad request is answered before any database work.
func TestCreateRejectsBadRequests(t *testing.T) {
	o := &orders{log: slog.New(slog.DiscardHandler)}
	mux := http.NewServeMux()
	o.register(mux)
	for _, body := range []string{
		`not json`,
		`{"customer":"c","amount":0}`,
		`{"amount":10}`,
		`{"id":"a/b","customer":"c","amount":10}`,
	} {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body)))
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"error"`) {
			t.Errorf("POST /orders %s: %d %s", body, w.Code, w.Body)
		}
	}
}
