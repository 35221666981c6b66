package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// These tests apply batches of records straight to PostgreSQL (no Kafka):
// applyRecords is the whole path from fetched records to outcomes.

// rec builds a record as the relay writes it.
func rec(id, agg string, version int64, offset int64) kafka.Message {
	return kafka.Message{
		Topic: "t", Partition: 0, Offset: offset, Key: []byte(agg), Value: []byte(`{}`), Time: time.Now(),
		Headers: []kafka.Header{
			{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte("order.updated")},
			{Key: "schema_version", Value: []byte("1")}, {Key: "aggregate_type", Value: []byte("order")},
			{Key: "aggregate_version", Value: []byte(strconv.FormatInt(version, 10))},
		},
	}
}

// batchRig is a migrated schema with a versioned state table and an effect
// log (no unique constraint, so an effect applied twice shows).
type batchRig struct {
	t      *testing.T
	s      testenv.Scratch
	state  string
	effect string
}

func newBatchRig(t *testing.T) *batchRig {
	s := testenv.Reserve(t)
	if err := Migrate(s.Ctx, s.Pool, s.Schema); err != nil {
		t.Fatal(err)
	}
	r := &batchRig{t: t, s: s, state: pgx.Identifier{s.Schema, "state"}.Sanitize(), effect: pgx.Identifier{s.Schema, "effect"}.Sanitize()}
	if _, err := s.Pool.Exec(s.Ctx, `CREATE TABLE `+r.state+` (id text PRIMARY KEY, version bigint NOT NULL);
		CREATE TABLE `+r.effect+` (event_id uuid NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return r
}

// applyOne is a version-checked effect: version 1 creates the aggregate,
// every later version must follow the stored one.
func (r *batchRig) applyOne(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
	if _, err := tx.Exec(ctx, `INSERT INTO `+r.effect+` VALUES ($1)`, ev.ID); err != nil {
		return err
	}
	if ev.AggregateVersion == 1 {
		tag, err := tx.Exec(ctx, `INSERT INTO `+r.state+` VALUES ($1, 1) ON CONFLICT DO NOTHING`, ev.AggregateID)
		if err != nil {
			return err
		}
		return ExpectRows(tag, 1)
	}
	tag, err := tx.Exec(ctx, `UPDATE `+r.state+` SET version = $2 WHERE id = $1 AND version = $2 - 1`, ev.AggregateID, ev.AggregateVersion)
	if err != nil {
		return err
	}
	return ExpectRows(tag, 1)
}

func (r *batchRig) consumer(mod func(*Config), opts ...Option) *Consumer {
	cfg := Config{Name: "c", Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}, Pool: r.s.Pool, Schema: r.s.Schema,
		Handler: r.applyOne, BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg, opts...)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// effects returns how often each event's effect was applied.
func (r *batchRig) effects() map[string]int {
	rows, err := r.s.Pool.Query(r.s.Ctx, `SELECT event_id::text, count(*)::int FROM `+r.effect+` GROUP BY 1`)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			r.t.Fatal(err)
		}
		out[id] = n
	}
	return out
}

func (r *batchRig) version(agg string) int64 {
	var v int64
	if err := r.s.Pool.QueryRow(r.s.Ctx, `SELECT coalesce((SELECT version FROM `+r.state+` WHERE id = $1), 0)`, agg).Scan(&v); err != nil {
		r.t.Fatal(err)
	}
	return v
}

// script is a batch of records: aggregates a, b, c with versions 1-4,
// interleaved as the relay would publish them to one partition.
func script() (msgs []kafka.Message, ids map[string]string) {
	ids = map[string]string{}
	for v := int64(1); v <= 4; v++ {
		for _, agg := range []string{"a", "b", "c"} {
			id := uuid.NewString()
			ids[fmt.Sprintf("%s%d", agg, v)] = id
			msgs = append(msgs, rec(id, agg, v, int64(len(msgs))))
		}
	}
	return msgs, ids
}

// TestBatchFailureInBatch: a permanent failure of b2 in the middle of a
// batch dead-letters exactly b2 and parks b3 and b4, a transient failure
// of c3 is retried, and every other event is applied once, in order. Run
// with a Handler (split at the failing event) and a BatchHandler (halved
// until the failing event is alone).
func TestBatchFailureInBatch(t *testing.T) {
	for _, mode := range []string{"handler", "batch handler"} {
		t.Run(mode, func(t *testing.T) {
			r := newBatchRig(t)
			msgs, ids := script()
			var mu sync.Mutex
			calls := map[string]int{}
			fail := func(ev *record.Event) error {
				mu.Lock()
				defer mu.Unlock()
				calls[ev.ID]++
				switch ev.ID {
				case ids["b2"]:
					return poison.Permanent(errors.New("cannot apply b2"))
				case ids["c3"]:
					if calls[ev.ID] == 1 {
						return errors.New("downstream hiccup")
					}
				}
				return nil
			}
			c := r.consumer(func(cfg *Config) {
				if mode == "handler" {
					cfg.Handler = func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
						if err := fail(ev); err != nil {
							return err
						}
						return r.applyOne(ctx, tx, ev)
					}
					return
				}
				cfg.Handler = nil
				cfg.BatchHandler = func(ctx context.Context, tx pgx.Tx, evs []*record.Event) error {
					for _, ev := range evs {
						if err := fail(ev); err != nil {
							return err
						}
						if err := r.applyOne(ctx, tx, ev); err != nil {
							return err
						}
					}
					return nil
				}
			})
			done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs)
			if err != nil || done != len(msgs) {
				t.Fatalf("applyRecords = %d, %v; want %d, nil", done, err, len(msgs))
			}
			st := c.Stats()
			t.Logf("%s: %+v", mode, st)
			if st.Applied != 9 || st.DeadLettered != 1 || st.Parked != 2 || st.Duplicates != 0 {
				t.Fatalf("stats %+v: want 9 applied, 1 dead-lettered, 2 parked", st)
			}
			// A Handler's c3 fails alone and is retried; a BatchHandler's
			// c3 fails inside a half, which is halved again.
			if mode == "handler" && st.Retries != 1 {
				t.Fatalf("stats %+v: want 1 retry (c3)", st)
			}
			if calls[ids["c3"]] < 2 {
				t.Fatalf("c3 handled %d times: the hiccup did not happen", calls[ids["c3"]])
			}
			eff := r.effects()
			for key, id := range ids {
				want := 1
				if key == "b2" || key == "b3" || key == "b4" {
					want = 0
				}
				if eff[id] != want {
					t.Errorf("%s applied %d times, want %d", key, eff[id], want)
				}
			}
			if r.version("a") != 4 || r.version("b") != 1 || r.version("c") != 4 {
				t.Fatalf("versions a=%d b=%d c=%d; want 4, 1, 4", r.version("a"), r.version("b"), r.version("c"))
			}
			dls, err := c.DeadLetters(r.s.Ctx, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, d := range dls {
				got = append(got, fmt.Sprintf("%s:%s%d:%d", d.Status, d.AggregateID, d.AggregateVersion, d.Attempts))
			}
			if want := []string{"dead:b2:1", "parked:b3:0", "parked:b4:0"}; !slices.Equal(got, want) {
				t.Fatalf("dead letters %v, want %v", got, want)
			}
		})
	}
}

// TestBatchDuplicates: an event twice in one batch, and one processed by
// an earlier batch, are each absorbed and counted; a redelivery of the
// whole batch applies nothing.
func TestBatchDuplicates(t *testing.T) {
	r := newBatchRig(t)
	msgs, ids := script()
	c := r.consumer(nil)
	if done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs[:3]); err != nil || done != 3 {
		t.Fatalf("first batch: %d, %v", done, err)
	}
	batch := slices.Clone(msgs[:6])
	batch = append(batch[:5], msgs[3], batch[5]) // a2 twice
	if done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, batch); err != nil || done != len(batch) {
		t.Fatalf("second batch: %d, %v", done, err)
	}
	if st := c.Stats(); st.Applied != 6 || st.Duplicates != 4 {
		t.Fatalf("stats %+v: want 6 applied, 4 duplicates (a1 b1 c1 again, a2 twice)", st)
	}
	if done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs); err != nil || done != len(msgs) {
		t.Fatalf("redelivery: %d, %v", done, err)
	}
	if st := c.Stats(); st.Applied != 12 || st.Duplicates != 10 {
		t.Fatalf("stats %+v: want 12 applied, 10 duplicates", st)
	}
	for key, id := range ids {
		if n := r.effects()[id]; n != 1 {
			t.Errorf("%s applied %d times", key, n)
		}
	}
}

// TestBatchHalt: under poison.Halt, applyRecords reports only the records
// before the failing one as done, so no offset passes it.
func TestBatchHalt(t *testing.T) {
	r := newBatchRig(t)
	msgs, ids := script()
	c := r.consumer(func(cfg *Config) {
		cfg.Policy = poison.Halt
		cfg.Handler = func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
			if ev.ID == ids["a3"] {
				return poison.Permanent(errors.New("no"))
			}
			return r.applyOne(ctx, tx, ev)
		}
	})
	done, err := c.applyRecords(r.s.Ctx, r.s.Ctx, msgs)
	var he *poison.HaltError
	if !errors.As(err, &he) || done != 6 {
		t.Fatalf("applyRecords = %d, %v; want 6 and a HaltError", done, err)
	}
	if he.EventID != ids["a3"] || he.AggregateID != "a" || he.Reason != "no" || he.Held != "its offset" {
		t.Fatalf("HaltError = %+v", he)
	}
	if want := "the stream stops with its offset held"; !strings.Contains(err.Error(), want) {
		t.Fatalf("HaltError says %q, want %q in it", err, want)
	}
	if st := c.Stats(); st.Applied != 6 {
		t.Fatalf("stats %+v", st)
	}
}

// TestBatchDecodeError: a record that is not an outbox event is
// dead-lettered where it stands; the records around it are applied.
func TestBatchDecodeError(t *testing.T) {
	r := newBatchRig(t)
	msgs, _ := script()
	bad := kafka.Message{Topic: "t", Offset: 99, Key: []byte("x"), Value: []byte("?")}
	batch := append(slices.Clone(msgs[:3]), bad)
	batch = append(batch, msgs[3:]...)
	done, err := r.consumer(nil).applyRecords(r.s.Ctx, r.s.Ctx, batch)
	if err != nil || done != len(batch) {
		t.Fatalf("applyRecords = %d, %v", done, err)
	}
	if r.version("a") != 4 || r.version("c") != 4 {
		t.Fatalf("a=%d c=%d", r.version("a"), r.version("c"))
	}
}

// TestBatchLocksDoNotDeadlock: two instances of one consumer apply
// batches of the same two aggregates listed in opposite orders while a
// third session holds the lock of one of them; when it lets go, both
// batches compete for both locks. Taken in record order, they would
// deadlock in about half of the rounds (PostgreSQL aborts one, which is
// retried); taken in key order they never do, so no round retries.
func TestBatchLocksDoNotDeadlock(t *testing.T) {
	r := newBatchRig(t)
	insert := func(ctx context.Context, tx pgx.Tx, ev *record.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+r.effect+` VALUES ($1)`, ev.ID)
		return err
	}
	one, two := r.consumer(func(cfg *Config) { cfg.Handler = insert }), r.consumer(func(cfg *Config) { cfg.Handler = insert })
	const rounds = 8
	for round := range rounds {
		p, m := fmt.Sprintf("p%d", round), fmt.Sprintf("m%d", round)
		blocker, err := r.s.Pool.Begin(r.s.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := blocker.Exec(r.s.Ctx, lockSQL, "c", "order", m); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2)
		for i, batch := range [][]string{{p, m}, {m, p}} {
			cons := []*Consumer{one, two}[i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				msgs := []kafka.Message{rec(uuid.NewString(), batch[0], 1, 0), rec(uuid.NewString(), batch[1], 1, 1)}
				if _, err := cons.applyRecords(r.s.Ctx, r.s.Ctx, msgs); err != nil {
					errs <- err
				}
			}()
		}
		// Both batches wait (on the blocker, or one on the other).
		for {
			var waiting int
			if err := r.s.Pool.QueryRow(r.s.Ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting >= 2 {
				break
			}
			// wall-clock: polls the real server's pg_locks, which signals nothing.
			time.Sleep(time.Millisecond)
		}
		if err := blocker.Commit(r.s.Ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	if a, b := one.Stats(), two.Stats(); a.Retries+b.Retries != 0 || a.Applied+b.Applied != 4*rounds {
		t.Fatalf("stats %+v and %+v: want no retries (no deadlock) and %d applied", a, b, 4*rounds)
	}
}
