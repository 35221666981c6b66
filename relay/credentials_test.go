package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestBeforeConnectOnEveryConnection: the hook is called for the pool,
// the replication connection and the leader's lock connection, each time
// with a configuration of its own (what one call sets, the next does not
// see), and the relay streams with the password it sets.
func TestBeforeConnectOnEveryConnection(t *testing.T) {
	s := newStack(t, 3)
	var mu sync.Mutex
	calls := map[string]int{}
	leaked := 0
	s.cfg.Database.BeforeConnect = func(_ context.Context, cfg *pgconn.Config) error {
		mu.Lock()
		defer mu.Unlock()
		kind := "pool"
		switch {
		case cfg.RuntimeParams["replication"] == "database":
			kind = "replication"
		case cfg.RuntimeParams["application_name"] == "outbox-relay-leader":
			kind = "lock"
		}
		calls[kind]++
		if cfg.Password == "set-by-the-hook" {
			leaked++
		}
		cfg.Password = "set-by-the-hook" // the stack trusts 127.0.0.1: any password signs in
		return nil
	}
	stop := start(s.newRelay("r1"))
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s.write(ctx, 50, 5, 5, 0); err != nil {
		t.Fatal(err)
	}
	s.consume(ctx, 50)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, kind := range []string{"pool", "replication", "lock"} {
		if calls[kind] == 0 {
			t.Errorf("no %s connection called the hook (calls %v)", kind, calls)
		}
	}
	if leaked > 0 {
		t.Errorf("%d calls saw the password a previous call set: the configuration is shared, not copied", leaked)
	}
	t.Logf("hook calls: %v", calls)
}
