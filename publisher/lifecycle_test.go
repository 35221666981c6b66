package publisher

import (
	"context"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/segmentio/kafka-go/protocol/endtxn"

	"github.com/outbox-relay/outbox-relay/replication"
)

// linger is a call into the publisher's surroundings that, once its
// context ends, takes a while to return, as a query or request finishing
// on a slow connection does; inside counts the calls running. Its wait
// is on the fake clock (synctest): an owner that did not wait for the
// goroutine making the call returns while the call is still inside.
type linger struct{ inside atomic.Int32 }

func (l *linger) wait(ctx context.Context) error {
	l.inside.Add(1)
	defer l.inside.Add(-1)
	<-ctx.Done()
	time.Sleep(time.Second) // virtual time
	return ctx.Err()
}

// lingeringDeadLetters quarantines aggregate "q" and lingers in Hold on
// the events of aggregate "q" (asked by the quarantine's goroutine) or of
// topic "held" (asked by that topic's lane before it sends).
type lingeringDeadLetters struct{ l *linger }

func (d lingeringDeadLetters) Quarantines(ev *replication.WALEvent) bool {
	return ev.AggregateID == "q"
}
func (d lingeringDeadLetters) Hold(ctx context.Context, ev *replication.WALEvent, topic string) (bool, error) {
	if ev.AggregateID == "q" || topic == "held" {
		return false, d.l.wait(ctx)
	}
	return false, nil
}
func (lingeringDeadLetters) Poison(context.Context, *replication.WALEvent, string, string, string) error {
	return nil
}

// slowMetadata lingers in the metadata questions about topic "slow"
// (asked by that topic's router).
type slowMetadata struct {
	*fakeCluster
	l *linger
}

func (c slowMetadata) RoundTrip(ctx context.Context, addr net.Addr, msg protocol.Message) (protocol.Message, error) {
	if q, ok := msg.(*metadataQuestion); ok && slices.Contains(q.Topics, "slow") {
		return nil, c.l.wait(ctx)
	}
	return c.fakeCluster.RoundTrip(ctx, addr, msg)
}

// TestCloseLeavesNoGoroutine: when Close returns, every goroutine the
// publisher started has returned: the sink's collector and senders, the
// quarantine, every router (live, and one that retired idle) and every
// lane, even one that is inside a call that lingers after its context
// ended. Each case makes one owner's goroutine linger: a bare go
// statement, or an owner that did not wait for it, leaves it on the stack
// (or the call inside) when Close returns.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	for _, c := range []struct {
		name  string
		topic string // of the lingering event
		agg   string
	}{
		{"lane", "held", "h"},
		{"router", "slow", "s"},
		{"quarantine", "busy", "q"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := &linger{}
				cluster := newFakeCluster(okBroker{})
				for _, topic := range []string{"idle", "busy", "held", "slow"} {
					cluster.setPartitions(topic, 2)
				}
				cfg := config{Config: Config{BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, TopicIdleTimeout: time.Second}, Brokers: []string{"127.0.0.1:1"}, DeadLetters: lingeringDeadLetters{l}}
				tt, err := ParseTopicTemplate("{aggregate_type}")
				if err != nil {
					t.Fatal(err)
				}
				cfg.Template = tt
				cfg = testConfig(cfg)
				p := newPublisher(cfg, slog.New(slog.DiscardHandler), nil, slowMetadata{cluster, l}, nil)

				var acks ackLog
				publish := func(topic, id string) {
					t.Helper()
					if err := p.Publish(context.Background(), testEvent(topic, id, topic+"-"+id), acks.acker(topic+"-"+id)); err != nil {
						t.Fatal(err)
					}
				}
				publish("idle", "a1")
				acks.waitFor(t, 1, time.Minute)
				time.Sleep(5 * time.Second) // virtual: idle's lanes and then its router retire
				synctest.Wait()
				p.mu.Lock()
				retired := p.routers["idle"] == nil
				p.mu.Unlock()
				if !retired {
					t.Fatal("the idle topic's router did not retire")
				}
				publish("busy", "b1")
				publish("busy", "b2")
				acks.waitFor(t, 3, time.Minute)
				publish(c.topic, c.agg)
				synctest.Wait()
				if n := l.inside.Load(); n != 1 {
					t.Fatalf("%d lingering calls, want 1", n)
				}
				if n := publisherGoroutines(); n == 0 {
					t.Fatal("no goroutine of the publisher found before Close: the stack check is blind")
				}

				if err := p.Close(); err != nil {
					t.Fatal(err)
				}
				if n := l.inside.Load(); n != 0 {
					t.Fatalf("Close returned with the %s's call still under way", c.name)
				}
				if n := publisherGoroutines(); n != 0 {
					t.Fatalf("Close returned with %d goroutine(s) of the publisher running", n)
				}
			})
		})
	}
}

// publisherGoroutines counts the goroutines running a loop of the
// publisher or of its sink.
func publisherGoroutines() int {
	buf := make([]byte, 1<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		for _, loop := range []string{"publisher.(*router).run(", "publisher.(*lane).run(", "publisher.(*quarantine).run(",
			"publisher.(*transactions).run(", "kafkaproduce.(*Sink).collect(", "kafkaproduce.(*Sink).sendGroups("} {
			if strings.Contains(g, loop) {
				n++
				break
			}
		}
	}
	return n
}

// lingeringCommit lingers in every committing EndTxn (the committer's
// request) and passes everything else to the transaction broker.
type lingeringCommit struct {
	*txnBroker
	l *linger
}

func (b lingeringCommit) RoundTrip(ctx context.Context, addr net.Addr, msg protocol.Message) (protocol.Message, error) {
	if req, ok := msg.(*endtxn.Request); ok && req.Committed {
		return nil, b.l.wait(ctx)
	}
	return b.txnBroker.RoundTrip(ctx, addr, msg)
}

// TestCloseWaitsForTheCommitter: Close returns only once the committer
// (exactly-once mode) has, even while its EndTxn lingers after the
// publisher's context ended, and leaves no goroutine of the publisher.
func TestCloseWaitsForTheCommitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &linger{}
		c := newFakeCluster(lingeringCommit{newTxnBroker(), l})
		c.setPartitions("orders", 3)
		c.setPartitions("pos", 1)
		cfg := config{Transactions: &TransactionConfig{ID: "tid", Interval: 20 * time.Millisecond, PositionsTopic: "pos", PositionKey: []byte("slot"),
			Position: func(last *replication.WALEvent, _ int) []byte { return []byte(last.EventID) }}}
		p, _ := startPublisher(t, cfg, slog.New(slog.DiscardHandler), c)
		if _, err := p.begin(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := p.Publish(context.Background(), testEvent("orders", "a", "e1"), nopAck{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // virtual: the range closes and its commit begins
		synctest.Wait()
		if n := l.inside.Load(); n != 1 {
			t.Fatalf("%d commits under way, want 1", n)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		if n := l.inside.Load(); n != 0 {
			t.Fatal("Close returned with the committer's EndTxn still under way")
		}
		if n := publisherGoroutines(); n != 0 {
			t.Fatalf("Close returned with %d goroutine(s) of the publisher running", n)
		}
	})
}
