package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
)

// lease campaigns for a slot of its own on the test database; keepalives
// are rare, so only Confirm checks the lock within the test.
func lease(t *testing.T, ctx context.Context) (*Lease, string) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	e, err := NewElector(Config{DatabaseURL: url, Slot: fmt.Sprintf("confirm_%d", time.Now().UnixNano()),
		PollInterval: time.Second, KeepaliveInterval: 10 * time.Second, Timeout: time.Minute}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l, url
}

// TestLeaseConfirmSeesALostServerAtOnce: when the lock's session ends (the
// server crashed or failed over), Confirm reports the loss now, not at the
// next keepalive, and ends the lease.
func TestLeaseConfirmSeesALostServerAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, url := lease(t, ctx)
	if err := l.Confirm(ctx); err != nil {
		t.Fatalf("Confirm on a held lock: %v", err)
	}
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend($1)`, l.conn.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := l.Confirm(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("Confirm after the lock session ended = %v, want ErrLost", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Confirm took %s: it waited for a keepalive", d)
	}
	if !errors.Is(l.Err(), ErrLost) || l.Context().Err() == nil {
		t.Fatalf("lease after a failed Confirm: Err = %v, context %v", l.Err(), l.Context().Err())
	}
	if err := l.Confirm(ctx); !errors.Is(err, ErrLost) {
		t.Fatalf("Confirm on a lost lease = %v, want ErrLost", err)
	}
}

// TestLeaseConfirmAfterRelease: a released lease is not confirmed.
func TestLeaseConfirmAfterRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, _ := lease(t, ctx)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Confirm(ctx); !errors.Is(err, ErrReleased) {
		t.Fatalf("Confirm after Release = %v, want ErrReleased", err)
	}
}
