package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/checkpoint"
	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
	"github.com/outbox-relay/outbox-relay/migrations"
	"github.com/outbox-relay/outbox-relay/publisher"
	"github.com/outbox-relay/outbox-relay/replication"
)

// recorder is a Publisher that acknowledges every event at once.
type recorder struct {
	mu     sync.Mutex
	events []*replication.WALEvent
	closed bool
}

func (r *recorder) Publish(_ context.Context, ev *replication.WALEvent, ack publisher.Acker) error {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	ack.Ack(len(ev.Payload))
	return nil
}

func (r *recorder) Fatal() <-chan error { return nil }
func (r *recorder) Close() error        { r.closed = true; return nil }

// TestRunAgainstStack: a dry run lists without publishing; a replay
// publishes every selected event, in order per aggregate, marked.
func TestRunAgainstStack(t *testing.T) {
	pool := testenv.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table, err := migrations.ParseTable(testenv.Schema(t, pool, "replay") + ".outbox")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, pool, table, migrations.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		agg := fmt.Sprint("a-", i%2)
		if _, err := pool.Exec(ctx, `INSERT INTO `+table.Quoted()+` (event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, payload) VALUES ($1, 'order', $2, $3, 'order.placed', 1, '{}')`, uuid.New(), agg, i/2+1); err != nil {
			t.Fatal(err)
		}
	}
	var pub *recorder
	var out bytes.Buffer
	deps := Deps{
		Pool: pool,
		Identify: func(context.Context) (checkpoint.Identity, error) {
			return checkpoint.Identity{SystemID: "1", Timeline: 1}, nil
		},
		NewPublisher: func() Publisher { pub = &recorder{}; return pub },
		Out:          &out,
	}
	cfg := Config{Table: table, Slot: "replay_test", Range: Range{All: true}, DryRun: true, List: 2}

	if err := Run(ctx, cfg, deps); err != nil {
		t.Fatal(err)
	}
	if pub != nil {
		t.Error("a dry run built a publisher")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 || lines[0] != "replay "+table.String()+": every row in the table" ||
		!strings.HasPrefix(lines[1], "  5 events, ordered ") || !strings.Contains(lines[1], "header outbox_replay=replay") ||
		lines[4] != "dry run: nothing published" {
		t.Errorf("dry run output:\n%s", out.String())
	}

	out.Reset()
	cfg.DryRun, cfg.AggregateID = false, "a-0"
	if err := Run(ctx, cfg, deps); err != nil {
		t.Fatal(err)
	}
	if pub == nil || !pub.closed || len(pub.events) != 3 {
		t.Fatalf("published %+v", pub)
	}
	for i, ev := range pub.events {
		var h map[string]string
		if err := json.Unmarshal(ev.Headers, &h); err != nil || ev.AggregateID != "a-0" || ev.AggregateVersion != fmt.Sprint(i+1) || h["outbox_replay"] != "replay" {
			t.Errorf("event %d: %s v%s headers %s", i, ev.AggregateID, ev.AggregateVersion, ev.Headers)
		}
	}
	if !strings.Contains(out.String(), "  3 events, ordered") || !strings.Contains(out.String(), "replayed 3 events in ") {
		t.Errorf("output:\n%s", out.String())
	}

	// Without a checkpoint there is nothing to start from.
	cfg.Range = Range{FromCheckpoint: true}
	if err := Run(ctx, cfg, deps); !errors.Is(err, checkpoint.ErrCheckpointNotFound) {
		t.Errorf("--from-checkpoint without one: %v", err)
	}
}
