package inbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/poison"
	"github.com/outbox-relay/outbox-relay/record"
)

// runRig is a topic with events on the local stack and a migrated schema
// for a consumer of it. Its tests are not parallel: goleak must see only
// their own goroutines (the parallel tests of this package wait until the
// sequential ones are done).
type runRig struct {
	t   *testing.T
	cfg Config
}

func newRunRig(t *testing.T, partitions, events int) *runRig {
	t.Helper()
	brokers := testenv.KafkaBrokers(t)
	pool := testenv.Pool(t)
	schema := testenv.Schema(t, pool, "inbox_run")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Migrate(ctx, pool, schema); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	sfx := hex.EncodeToString(b)
	topic := "inbox-run." + sfx

	// The test's Kafka clients use a transport of their own, closed
	// before the consumer starts: none of their goroutines is left for
	// goleak to see.
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{
		Topics: []kafka.TopicConfig{{Topic: topic, NumPartitions: partitions, ReplicationFactor: 1}},
	})
	if err == nil {
		err = res.Errors[topic]
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	t.Cleanup(func() {
		tr := &kafka.Transport{}
		defer tr.CloseIdleConnections()
		client := &kafka.Client{Addr: kafka.TCP(brokers...), Transport: tr, Timeout: 10 * time.Second}
		_, _ = client.DeleteTopics(context.Background(), &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	})
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Topic: topic, Transport: tr, Balancer: &kafka.Hash{}, RequiredAcks: kafka.RequireAll}
	msgs := make([]kafka.Message, events)
	for i := range msgs {
		msgs[i] = rec(uuid.NewString(), "agg-"+strconv.Itoa(i%7), int64(i/7+1), 0)
		msgs[i].Topic, msgs[i].Partition, msgs[i].Offset = "", 0, 0
	}
	for {
		err = w.WriteMessages(ctx, msgs...)
		if !errors.Is(err, kafka.UnknownTopicOrPartition) && !errors.Is(err, kafka.LeaderNotAvailable) || ctx.Err() != nil {
			break
		}
		// wall-clock: paces the retries while the real broker elects the new topic's leaders.
		time.Sleep(100 * time.Millisecond)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
	return &runRig{t: t, cfg: Config{
		Name: "run-" + sfx, Brokers: brokers, Topics: []string{topic}, Pool: pool, Schema: schema,
		Handler:     func(context.Context, pgx.Tx, *record.Event) error { return nil },
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond,
		// The pruning loop runs too (at once, then hourly).
		Retention: time.Hour, ReplayWindow: time.Hour,
		CommitInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		TuneReader: func(rc *kafka.ReaderConfig) {
			rc.HeartbeatInterval, rc.SessionTimeout, rc.JoinGroupBackoff = 200*time.Millisecond, 6*time.Second, 200*time.Millisecond
		},
	}}
}

// running is a consumer's Run in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned, err set
	err    error
}

// run starts a consumer of cfg.
func (r *runRig) run(cfg Config) (*Consumer, *running) {
	r.t.Helper()
	return r.runHooked(cfg, nil)
}

// runHooked is run with loopExit's hook set to f (nil: none).
func (r *runRig) runHooked(cfg Config, f func(loop string)) (*Consumer, *running) {
	r.t.Helper()
	c, err := New(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	c.loopExitHook = f
	ctx, cancel := context.WithCancel(context.Background())
	run := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		run.err = c.Run(ctx)
	}()
	return c, run
}

// stop cancels Run's context and returns its error once it returned.
func (run *running) stop() error {
	run.cancel()
	<-run.done
	return run.err
}

// TestRunLeavesNoGoroutine: once Run returned - drained after its context
// ended, or halted by a permanent failure - no goroutine of the consumer
// is left: not a partition worker, its reader or its grace period, not a
// committer, not the pruning loop. goleak retries for about half a
// second, which lets goroutines ending by themselves (a context.AfterFunc
// callback, kafka-go and pgx closing connections) finish. Nothing of
// another library needs ignoring: Run closes its consumer group and
// readers, and the test's pool and producer existed before the check
// started (goleak.IgnoreCurrent) or were closed.
func TestRunLeavesNoGoroutine(t *testing.T) {
	t.Run("drained", func(t *testing.T) {
		const events = 200
		r := newRunRig(t, 3, events)
		before := goleak.IgnoreCurrent()
		c, run := r.run(r.cfg)
		defer run.stop()
		deadline := time.Now().Add(45 * time.Second)
		for s := c.Stats(); s.Applied < events || s.Commits == 0; s = c.Stats() {
			if time.Now().After(deadline) {
				t.Fatalf("stats after 45s: %+v, want %d applied and a commit", s, events)
			}
			// wall-clock: polls the stats of a consumer working against the real servers.
			time.Sleep(50 * time.Millisecond)
		}
		if err := run.stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		goleak.VerifyNone(t, before)
	})
	t.Run("halted", func(t *testing.T) {
		r := newRunRig(t, 3, 30)
		cfg := r.cfg
		cfg.Policy, cfg.MaxAttempts = poison.Halt, 1
		cfg.Handler = func(context.Context, pgx.Tx, *record.Event) error { return poison.Permanent(errors.New("refused")) }
		before := goleak.IgnoreCurrent()
		_, run := r.run(cfg)
		defer run.stop()
		select {
		case <-run.done:
			var halt *poison.HaltError
			if !errors.As(run.err, &halt) {
				t.Fatalf("Run: %v, want a *poison.HaltError", run.err)
			}
		case <-time.After(45 * time.Second):
			t.Fatal("Run did not halt within 45s")
		}
		goleak.VerifyNone(t, before)
	})
}

// TestRunWaitsForItsGoroutines: Run returns only after each of its
// goroutines ended - the pruning loop, the partition workers, their grace
// periods and the committer - even one that takes a while to end. Per
// goroutine, one consumer runs with that goroutine lingering for a second
// (longer than goleak's retries) once it ends: had Run started it with a
// bare go statement and not waited for it, it would still be running
// when Run returns.
func TestRunWaitsForItsGoroutines(t *testing.T) {
	for _, loop := range []string{"prune", "worker", "committer", "grace"} {
		t.Run(loop, func(t *testing.T) {
			const events = 20
			r := newRunRig(t, 2, events)
			var exited atomic.Bool
			f := func(l string) {
				if l == loop {
					// wall-clock: the goroutine must outlast goleak's retries, which run on the real clock.
					time.Sleep(time.Second)
					exited.Store(true)
				}
			}
			before := goleak.IgnoreCurrent()
			c, run := r.runHooked(r.cfg, f)
			defer run.stop()
			deadline := time.Now().Add(45 * time.Second)
			for s := c.Stats(); s.Applied < events || s.Commits == 0; s = c.Stats() {
				if time.Now().After(deadline) {
					t.Fatalf("stats after 45s: %+v, want %d applied and a commit", s, events)
				}
				// wall-clock: polls the stats of a consumer working against the real servers.
				time.Sleep(50 * time.Millisecond)
			}
			began := time.Now()
			if err := run.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if !exited.Load() {
				t.Errorf("Run returned while its %s goroutine still ran", loop)
			}
			t.Logf("Run returned %s after its context ended", time.Since(began).Round(time.Millisecond))
			goleak.VerifyNone(t, before)
		})
	}
}
