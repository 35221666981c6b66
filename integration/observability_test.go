//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsScrape is one read of a relay's /metrics: series (name with its
// label set, as exposed) -> value.
type metricsScrape map[string]float64

var scrapeClient = &http.Client{Timeout: 2 * time.Second}

// scrapeMetrics reads http://addr/metrics.
func scrapeMetrics(addr string) (metricsScrape, error) {
	resp, err := scrapeClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	m := metricsScrape{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		m[line[:i]] = v
	}
	return m, nil
}

// get returns the series name{labels}; labels are as exposed (sorted,
// quoted), e.g. `slot="x",status="lost"`.
func (m metricsScrape) get(name, labels string) (float64, bool) {
	key := name
	if labels != "" {
		key += "{" + labels + "}"
	}
	v, ok := m[key]
	return v, ok
}

// TestObservabilitySlotStats: events wait for a missing topic, so nothing
// is acknowledged; the PostgreSQL-side gauges (leader and a standby alike)
// show the slot's lag and retained WAL growing, the oldest unacknowledged
// age rising, a finite exhaustion forecast and the outbox table's stats.
// Once the topic exists everything is delivered and the lag falls back.
func TestObservabilitySlotStats(t *testing.T) {
	inSuites(t, parallel, stack)
	const (
		txs         = 20
		eventsPerTx = 10
		budget      = 1 << 30
	)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	relayEnv := []string{
		"OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m",
		"OUTBOX_RELAY_STATS_INTERVAL=300ms", fmt.Sprintf("OUTBOX_RELAY_WAL_DISK_BUDGET=%d", budget),
		"OUTBOX_RELAY_LEADER_POLL_INTERVAL=500ms", "OUTBOX_RELAY_LOG_LEVEL=info",
	}
	leaderAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	relay := env.StartRelay(append([]string{"OUTBOX_RELAY_METRICS_ADDR=" + leaderAddr}, relayEnv...)...)
	slotL := fmt.Sprintf(`slot=%q`, env.Slot)
	tableL := fmt.Sprintf(`table=%q`, env.Table)

	scrape := func(addr string) metricsScrape {
		t.Helper()
		m, err := scrapeMetrics(addr)
		if err != nil {
			t.Fatalf("scrape %s: %v", addr, err)
		}
		return m
	}
	// waitFor polls addr's metrics until cond holds.
	waitFor := func(addr, what string, d time.Duration, cond func(metricsScrape) bool) metricsScrape {
		t.Helper()
		var last metricsScrape
		if !within(d, 100*time.Millisecond, func() bool {
			m, err := scrapeMetrics(addr)
			if err != nil {
				return false
			}
			last = m
			return cond(m)
		}) {
			t.Fatalf("%s: not within %s (last scrape: lag %v, retained %v, age %v, in flight %v)", what, d,
				pick(last, "outbox_relay_slot_lag_bytes", slotL), pick(last, "outbox_relay_slot_retained_wal_bytes", slotL),
				pick(last, "outbox_relay_oldest_unacknowledged_event_age_seconds", ""), pick(last, "outbox_relay_inflight_events", ""))
		}
		return last
	}
	waitFor(leaderAddr, "leader streaming with slot stats", 30*time.Second, func(m metricsScrape) bool {
		exists, _ := m.get("outbox_relay_slot_exists", slotL)
		up, _ := m.get("outbox_relay_replication_connected", "")
		return exists == 1 && up == 1
	})
	// A standby reports the slot too (dashboards take max by slot).
	standbyAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	env.StartRelay(append([]string{"OUTBOX_RELAY_METRICS_ADDR=" + standbyAddr}, relayEnv...)...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	write := func() {
		t.Helper()
		for i := 0; i < txs; i++ {
			ids := make([]string, eventsPerTx)
			for k := range ids {
				ids[k] = aggName((i*eventsPerTx + k) % 50)
			}
			if _, err := w.Write(ctx, ids, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	write()
	s1 := waitFor(leaderAddr, "first batch in flight", 30*time.Second, func(m metricsScrape) bool {
		n, _ := m.get("outbox_relay_inflight_events", "")
		lag, _ := m.get("outbox_relay_slot_lag_bytes", slotL)
		return n == txs*eventsPerTx && lag > 0
	})
	// wall-clock: the oldest unacknowledged age must rise in real time (>= 2 s)
	time.Sleep(2 * time.Second)
	write()
	// Past two stats intervals after the second batch is in flight.
	waitFor(leaderAddr, "second batch in flight", 30*time.Second, func(m metricsScrape) bool {
		n, _ := m.get("outbox_relay_inflight_events", "")
		return n == 2*txs*eventsPerTx
	})
	// wall-clock: past two stats intervals (300 ms), so the gauges show the second batch
	time.Sleep(time.Second)
	s2 := scrape(leaderAddr)

	lag1, _ := s1.get("outbox_relay_slot_lag_bytes", slotL)
	lag2, _ := s2.get("outbox_relay_slot_lag_bytes", slotL)
	ret1, _ := s1.get("outbox_relay_slot_retained_wal_bytes", slotL)
	ret2, _ := s2.get("outbox_relay_slot_retained_wal_bytes", slotL)
	age1, _ := s1.get("outbox_relay_oldest_unacknowledged_event_age_seconds", "")
	age2, _ := s2.get("outbox_relay_oldest_unacknowledged_event_age_seconds", "")
	if !(lag2 > lag1 && lag1 > 0) {
		t.Errorf("slot lag did not grow: %v then %v", lag1, lag2)
	}
	if !(ret2 > ret1 && ret1 >= lag1) {
		t.Errorf("retained WAL did not grow (or is below the lag): %v then %v (lag %v)", ret1, ret2, lag1)
	}
	if !(age2 > age1 && age2 >= 2) {
		t.Errorf("oldest unacknowledged age did not rise: %v then %v", age1, age2)
	}
	exhaustion, ok := s2.get("outbox_relay_slot_wal_exhaustion_seconds", slotL)
	if !ok || exhaustion <= 0 || math.IsInf(exhaustion, 0) {
		t.Errorf("exhaustion forecast %v (present %v): want a finite positive forecast while WAL grows under a %d-byte budget", exhaustion, ok, budget)
	}
	for _, c := range []struct {
		name, labels string
		want         float64
	}{
		{"outbox_relay_slot_active", slotL, 1},
		{"outbox_relay_slot_wal_status", slotL + `,status="reserved"`, 1},
		{"outbox_relay_slot_wal_status", slotL + `,status="lost"`, 0},
		{"outbox_relay_stats_scrape_errors_total", `source="slot"`, 0},
		{"outbox_relay_stats_scrape_errors_total", `source="table"`, 0},
		{"outbox_relay_leader", "", 1},
	} {
		if got, ok := s2.get(c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s{%s} = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if safe, ok := s2.get("outbox_relay_slot_safe_wal_size_bytes", slotL); ok && safe <= 0 {
		t.Errorf("safe_wal_size %v on a healthy slot", safe)
	}
	size, _ := s2.get("outbox_relay_outbox_table_bytes", tableL)
	if size <= 0 {
		t.Errorf("outbox table size %v", size)
	}
	if _, ok := s2.get("outbox_relay_outbox_table_dead_tuples", tableL); !ok {
		t.Errorf("no dead tuples series for %s", env.Table)
	}
	// n_live_tup reaches the inserted rows once the writers' stats are flushed.
	st := waitFor(leaderAddr, "live tuples counted", 20*time.Second, func(m metricsScrape) bool {
		v, _ := m.get("outbox_relay_outbox_table_live_tuples", tableL)
		return v >= 2*txs*eventsPerTx
	})
	live, _ := st.get("outbox_relay_outbox_table_live_tuples", tableL)

	sb := waitFor(standbyAddr, "standby reports the slot", 20*time.Second, func(m metricsScrape) bool {
		v, _ := m.get("outbox_relay_slot_lag_bytes", slotL)
		return v >= lag2
	})
	standbyLag, _ := sb.get("outbox_relay_slot_lag_bytes", slotL)
	if l, _ := sb.get("outbox_relay_leader", ""); l != 0 {
		t.Errorf("second relay is leader too (%v)", l)
	}

	// Now the topic appears: everything is delivered, the lag falls back.
	env.CreateTopic(ctx, env.Topic, env.Partitions)
	c := StartConsumer(t, env.Topic, env.Partitions)
	committed := ledger.Committed()
	delivered := c.WaitFor(committed, 60*time.Second, time.Second)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Minute})
	// The description names the bounds, so that a failure says which one
	// held up (ci36 printed lag 2688 B and retained 1.26 MB, not the bounds).
	s3 := waitFor(leaderAddr, fmt.Sprintf("lag falls back after delivery (below lag %.0f B and retained %.0f B, no event in flight)", lag2, ret2),
		30*time.Second, func(m metricsScrape) bool {
			lag, _ := m.get("outbox_relay_slot_lag_bytes", slotL)
			ret, _ := m.get("outbox_relay_slot_retained_wal_bytes", slotL)
			age, _ := m.get("outbox_relay_oldest_unacknowledged_event_age_seconds", "")
			n, _ := m.get("outbox_relay_inflight_events", "")
			return lag < lag2 && ret < ret2 && age == 0 && n == 0
		})
	lag3, _ := s3.get("outbox_relay_slot_lag_bytes", slotL)
	ret3, _ := s3.get("outbox_relay_slot_retained_wal_bytes", slotL)
	published, _ := s3.get("outbox_relay_events_published_total", fmt.Sprintf(`topic=%q`, env.Topic))

	msg := fmt.Sprintf("TestObservabilitySlotStats: lag %.0f -> %.0f -> %.0f B (standby %.0f), retained %.0f -> %.0f -> %.0f B, "+
		"oldest unacked age %.1f -> %.1f s, exhaustion %.0f s (budget %d), table %.0f B live %.0f, delivered=%d/%d duplicates=%d published=%.0f",
		lag1, lag2, lag3, standbyLag, ret1, ret2, ret3, age1, age2, exhaustion, budget, size, live,
		rep.Delivered, rep.Committed, rep.Duplicates, published)
	t.Log(msg)
	fmt.Println(msg)
	if !delivered {
		t.Errorf("not every committed event arrived after the topic was created")
	}
	RequireOK(t, rep)
	if code, exited := relay.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want a clean exit 0", exited, code)
	}
}

// pick is get for log messages: the value or "absent".
func pick(m metricsScrape, name, labels string) string {
	if v, ok := m.get(name, labels); ok {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "absent"
}

// TestObservabilityRedelivered: relay #1 hands events to a missing topic
// (decoded, never acknowledged) and is killed; relay #2 publishes them
// again, and outbox_relay_events_redelivered_total counts exactly those —
// not the events written after it started. That they never reached Kafka
// shows the metric's meaning: possibly delivered, not surely duplicated.
func TestObservabilityRedelivered(t *testing.T) {
	inSuites(t, parallel, stack)
	const (
		before      = 10 // transactions for relay #1
		after       = 3  // transactions after relay #2 started
		eventsPerTx = 10
	)
	env := NewEnv(t, EnvOptions{NoTopic: true})
	relayEnv := []string{"OUTBOX_RELAY_CREATE_TOPICS=false", "OUTBOX_RELAY_UNKNOWN_TOPIC_TIMEOUT=10m", "OUTBOX_RELAY_LOG_LEVEL=info"}
	addr1 := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r1 := env.StartRelay(append([]string{"OUTBOX_RELAY_METRICS_ADDR=" + addr1}, relayEnv...)...)
	if !env.WaitSlotActive(true, 30*time.Second) {
		t.Fatal("relay #1 did not start streaming")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ledger := NewLedger()
	w := env.NewWriter(ledger)
	write := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			ids := make([]string, eventsPerTx)
			for k := range ids {
				ids[k] = aggName((i*eventsPerTx + k) % 20)
			}
			if _, err := w.Write(ctx, ids, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(before - 1)
	lastStart, err := ParseLSN(env.CurrentInsertLSN()) // the last transaction ends after this
	if err != nil {
		t.Fatal(err)
	}
	write(1)
	var decoded LSN
	if !within(20*time.Second, 100*time.Millisecond, func() bool {
		var s *string
		err := env.DB.QueryRow(ctx, `select decoded_lsn::text from public.outbox_relay_checkpoint
			where outbox_table = $1 and slot = $2 order by id desc limit 1`, env.Table, env.Slot).Scan(&s)
		if err != nil || s == nil {
			return false
		}
		decoded, _ = ParseLSN(*s)
		return decoded > lastStart
	}) {
		t.Fatalf("relay #1 never saved a decoded position past %s (last: %s) while Kafka did not acknowledge", lastStart, decoded)
	}
	cp, _ := env.checkpointLSN(t)
	if cp >= lastStart {
		t.Fatalf("precondition: checkpoint %s is past the unacknowledged events (%s)", cp, lastStart)
	}
	r1.Kill9()
	if !env.WaitSlotActive(false, 30*time.Second) {
		t.Fatal("slot still active after kill -9")
	}

	addr2 := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	r2 := env.StartRelay(append([]string{"OUTBOX_RELAY_METRICS_ADDR=" + addr2}, relayEnv...)...)
	if !env.WaitSlotActive(true, 30*time.Second) {
		t.Fatal("relay #2 did not start streaming")
	}
	write(after)
	env.CreateTopic(ctx, env.Topic, env.Partitions)
	c := StartConsumer(t, env.Topic, env.Partitions)
	committed := ledger.Committed()
	delivered := c.WaitFor(committed, 60*time.Second, time.Second)
	rep := c.Check(committed, CheckOptions{TimestampSkew: 5 * time.Minute})
	var m metricsScrape
	if !within(10*time.Second, 200*time.Millisecond, func() bool {
		m, err = scrapeMetrics(addr2)
		v, _ := m.get("outbox_relay_events_published_total", fmt.Sprintf(`topic=%q`, env.Topic))
		return err == nil && v == float64(len(committed))
	}) {
		t.Fatalf("relay #2 did not report %d published events (scrape error %v)", len(committed), err)
	}
	redelivered, _ := m.get("outbox_relay_events_redelivered_total", "")
	skipped, _ := m.get("outbox_relay_checkpoint_skipped_events_total", "")
	msg := fmt.Sprintf("TestObservabilityRedelivered: redelivered=%.0f (handed to Kafka by relay #1: %d) skipped=%.0f published=%d "+
		"delivered=%d/%d duplicates=%d decoded_lsn=%s checkpoint=%s",
		redelivered, before*eventsPerTx, skipped, len(committed), rep.Delivered, rep.Committed, rep.Duplicates, decoded, cp)
	t.Log(msg)
	fmt.Println(msg)
	if redelivered != before*eventsPerTx {
		t.Errorf("redelivered %v, want exactly the %d events relay #1 had handed to the publisher", redelivered, before*eventsPerTx)
	}
	if !delivered {
		t.Errorf("not every committed event arrived")
	}
	RequireOK(t, rep)
	if code, exited := r2.Term(20 * time.Second); !exited || code != 0 {
		t.Fatalf("SIGTERM: exited=%v code=%d, want a clean exit 0", exited, code)
	}
}
