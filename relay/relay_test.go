package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/outbox-relay/outbox-relay/relay"
)

// TestDeliversInOrder: a few thousand events, some committed before the
// relay starts and the rest while it streams, all reach Kafka, each
// aggregate's in order.
func TestDeliversInOrder(t *testing.T) {
	s := newStack(t, 6)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := s.write(ctx, 1500, 50, 25, 0); err != nil {
		t.Fatal(err)
	}
	r := s.newRelay("a")
	before := goleak.IgnoreCurrent()
	stop := start(r)
	defer stop()
	if err := s.write(ctx, 1500, 50, 25, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	d := s.consume(ctx, 3000)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	noGoroutineLeft(t, before)
	t.Logf("3000 events delivered, %d duplicates", d.duplicates)
}

// TestFailoverInProcess: two relays of one process share the slot's
// leadership; cancelling the leader's context mid-stream hands the slot to
// the other, and no event is lost (duplicates are allowed and counted).
func TestFailoverInProcess(t *testing.T) {
	s := newStack(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	relays := []*relay.Relay{s.newRelay("a"), s.newRelay("b")}
	before := goleak.IgnoreCurrent()
	stops := []func() error{start(relays[0]), start(relays[1])}
	defer stops[0]()
	defer stops[1]()
	leader := func() int {
		for i, r := range relays {
			if h := r.Readiness(); h.Role == "leader" && h.Streaming {
				return i
			}
		}
		return -1
	}
	if !waitFor(20*time.Second, func() bool { return leader() >= 0 }) {
		t.Fatal("no relay streams as leader within 20s")
	}
	first := leader()
	written := make(chan error, 1)
	go func() { written <- s.write(ctx, 2000, 20, 10, 3*time.Millisecond) }()
	if !waitFor(20*time.Second, func() bool { return published(relays[first]) >= 200 }) {
		t.Fatalf("relay %d published %v events within 20s", first, published(relays[first]))
	}
	if err := stops[first](); err != nil { // mid-stream
		t.Fatalf("relay %d: Run: %v", first, err)
	}
	if !waitFor(20*time.Second, func() bool { return leader() == 1-first }) {
		t.Fatalf("relay %d did not take over within 20s: %+v", 1-first, relays[1-first].Readiness())
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	d := s.consume(ctx, 2000)
	if err := stops[1-first](); err != nil {
		t.Fatalf("relay %d: Run: %v", 1-first, err)
	}
	noGoroutineLeft(t, before)
	t.Logf("relay %d led (%v events), relay %d took over (%v): 2000 events delivered, %d duplicates",
		first, published(relays[first]), 1-first, published(relays[1-first]), d.duplicates)
}

// published is the relay's outbox_relay_events_published_total, read
// from its /metrics.
func published(r *relay.Relay) float64 {
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var n float64
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "outbox_relay_events_published_total{") {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			n += v
		}
	}
	return n
}

// TestHandlerServesProbesAndMetrics: Handler's /readyz turns 200 once the
// relay streams, and /metrics serves the outbox_relay_ series.
func TestHandlerServesProbesAndMetrics(t *testing.T) {
	s := newStack(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := s.newRelay("a")
	h := r.Handler()
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Body)
		return rec.Code, string(body)
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, `"status":"not_ready"`) {
		t.Fatalf("/readyz before Run: %d %s", code, body)
	}
	before := goleak.IgnoreCurrent()
	stop := start(r)
	defer stop()
	if !waitFor(20*time.Second, func() bool { code, _ := get("/readyz"); return code == http.StatusOK }) {
		code, body := get("/readyz")
		t.Fatalf("/readyz not 200 within 20s: %d %s", code, body)
	}
	_, body := get("/readyz")
	var ready struct {
		Status, Role string
		Streaming    bool
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || ready.Status != "ready" || ready.Role != "leader" || !ready.Streaming {
		t.Fatalf("/readyz body %s (%v)", body, err)
	}
	if code, body := get("/healthz"); code != http.StatusOK || !strings.Contains(body, `"status":"alive"`) {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	if err := s.write(ctx, 10, 2, 5, 0); err != nil {
		t.Fatal(err)
	}
	s.consume(ctx, 10)
	code, metrics := get("/metrics")
	for _, want := range []string{"outbox_relay_leader 1", "outbox_relay_replication_connected 1", `outbox_relay_events_published_total{topic="` + s.topic + `"}`, "go_goroutines"} {
		if code != http.StatusOK || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	noGoroutineLeft(t, before)
}

// TestNewRejectsInvalidConfig: New reports every invalid field as a
// *FieldError and builds nothing.
func TestNewRejectsInvalidConfig(t *testing.T) {
	cfg := relay.DefaultConfig()
	cfg.Database.URL = "mysql://x"
	cfg.Database.Slot = "Bad-Name"
	cfg.Publish.MaxBatchBytes = 2048
	cfg.Window.MaxBytes = 1024
	cfg.Leader.KeepaliveInterval = time.Minute
	cfg.Publish.PoisonPolicy = "ignore"
	r, err := relay.New(cfg)
	if r != nil || err == nil {
		t.Fatalf("New accepted an invalid config: %v", err)
	}
	var fields []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *relay.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%T %v is not a *FieldError", e, e)
		}
		fields = append(fields, fe.Field)
	}
	want := []string{"Database.URL", "Database.Slot", "Kafka.Brokers", "Publish.PoisonPolicy", "Window.MaxBytes", "Leader"}
	for _, f := range want {
		if !slices.Contains(fields, f) {
			t.Errorf("no FieldError for %s: %v", f, err)
		}
	}
	if len(fields) != len(want) {
		t.Errorf("fields %v, want %v", fields, want)
	}
	for _, msg := range []string{`Database.Slot "Bad-Name": use 1-63`, "Kafka.Brokers: is required", "Window.MaxBytes 1024: use at least Publish.MaxBatchBytes (2048)"} {
		if !strings.Contains(err.Error(), msg) {
			t.Errorf("error lacks %q:\n%v", msg, err)
		}
	}
	if relay.DefaultConfig().Validate() == nil {
		t.Error("DefaultConfig without URL and brokers validates")
	}
}

// TestRegistererCollision: a second relay on the same registerer fails
// instead of panicking, and leaves the registerer as it was.
func TestRegistererCollision(t *testing.T) {
	cfg := relay.DefaultConfig()
	cfg.Database.URL, cfg.Kafka.Brokers = "postgres://u@h:5432/db", []string{"k:9092"}
	reg := prometheus.NewRegistry()
	labelled := func(v string) relay.Option {
		return relay.WithMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"outbox": v}, reg))
	}
	if _, err := relay.New(cfg, labelled("a")); err != nil {
		t.Fatal(err)
	}
	before, _ := reg.Gather()
	if _, err := relay.New(cfg, labelled("a")); err == nil {
		t.Fatal("second relay on the same registerer accepted")
	}
	if after, _ := reg.Gather(); len(after) != len(before) {
		t.Fatalf("failed New changed the registry: %d families, was %d", len(after), len(before))
	}
	if _, err := relay.New(cfg, labelled("b")); err != nil {
		t.Fatalf("registerer with another label: %v", err)
	}
	other := prometheus.NewRegistry()
	r, err := relay.New(cfg, relay.WithMetrics(other))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "outbox_relay_inflight_events") || strings.Contains(rec.Body.String(), "go_goroutines") {
		t.Fatalf("/metrics of a caller's registry:\n%s", rec.Body.String())
	}
}

// TestHealthAfterRunReturns: once Run has returned, Health says so (role
// "stopped", with Run's error) instead of the last role it had, so a
// service that keeps serving does not report a dead relay as a standby.
func TestHealthAfterRunReturns(t *testing.T) {
	defer goleak.VerifyNone(t) // last: after the listener closed
	// A server that refuses TLS to a client requiring it: a failure no
	// retry cures, so Run returns at once (an unreachable server would
	// be retried until ctx ends).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.ReadFull(c, make([]byte, 8)) // SSLRequest
			_, _ = c.Write([]byte("N"))
			c.Close()
		}
	}()
	cfg := relay.DefaultConfig()
	cfg.Database.URL = "postgres://relay@" + ln.Addr().String() + "/db?sslmode=require&connect_timeout=1"
	cfg.Kafka.Brokers = []string{"127.0.0.1:1"}
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if h := r.Readiness(); h.Role == "stopped" {
		t.Fatalf("Health before Run = %+v", h)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	runErr := r.Run(ctx)
	if runErr == nil {
		t.Fatal("Run against a closed port returned nil")
	}
	h := r.Readiness()
	if h.Status != "not_ready" || h.Role != "stopped" || !strings.Contains(h.Reason, runErr.Error()) {
		t.Fatalf("Health after Run failed with %v = %+v, want not_ready, role stopped and the error", runErr, h)
	}
}

// TestMultiHostURLs: the multi-host forms pgx supports, IPv6 included,
// are accepted, so a relay can follow a PostgreSQL failover.
func TestMultiHostURLs(t *testing.T) {
	for _, u := range []string{
		"postgres://relay:pw@pg-a:5432,pg-b:5432/app?target_session_attrs=read-write",
		"postgresql://relay@[::1]:5432,[::1]:5433/app?target_session_attrs=read-write",
		"host=pg-a,pg-b port=5432,5433 dbname=app user=relay target_session_attrs=read-write",
	} {
		cfg := relay.DefaultConfig()
		cfg.Database.URL, cfg.Kafka.Brokers = u, []string{"k:9092"}
		if _, err := relay.New(cfg, relay.WithMetrics(prometheus.NewRegistry())); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}
