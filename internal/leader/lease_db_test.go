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

// TestStandbyTakesTheLockWhenTheHoldersSessionExpires: a holder that went
// silent (a leader cut off without a reset) keeps its lock session until
// the server's idle_session_timeout ends it; the standby takes the lock
// right then, not up to PollInterval later. The campaign starts so that
// its regular polls just miss the expiry: before, it took the lock about a
// poll interval (1.5 s) late.
func TestStandbyTakesTheLockWhenTheHoldersSessionExpires(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.DatabaseURL(t)
	const timeout, poll = 3 * time.Second, 1500 * time.Millisecond
	slot := fmt.Sprintf("expiry_%d", time.Now().UnixNano())
	holder, err := pgx.Connect(ctx, url+"&idle_session_timeout="+fmt.Sprint(timeout.Milliseconds()))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	var db string
	if err := holder.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, Key(db, slot)); err != nil {
		t.Fatal(err)
	}
	idleSince := time.Now() // the holder says nothing more: the server ends it at idleSince + timeout
	e, err := NewElector(Config{DatabaseURL: url, Slot: slot, PollInterval: poll, KeepaliveInterval: 500 * time.Millisecond, Timeout: timeout},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// Polls at about 1.45 s and 2.95 s after idleSince: both before the expiry.
	// wall-clock: the campaign's start relative to the holder's silence is the case under test
	time.Sleep(1450 * time.Millisecond)
	l, err := e.Campaign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(idleSince)
	defer l.Release(context.Background())
	t.Logf("lock taken %s after the holder went silent (idle_session_timeout %s, poll interval %s)", took.Round(time.Millisecond), timeout, poll)
	if took > timeout+700*time.Millisecond {
		t.Errorf("lock taken %s after the holder went silent, want within %s of its session's expiry (%s)", took.Round(time.Millisecond), 700*time.Millisecond, timeout)
	}
}

// TestNextPollAfterTheHolderLeft: a holder whose session ends between the
// standby's try and its look at the holder (an idle_session_timeout that
// fires in that gap) leaves no lock row; the standby tries again within
// overdueRetry, not a whole poll later. Before, this gap made a takeover a
// poll interval late in CI (4.5 s for a 3 s timeout).
func TestNextPollAfterTheHolderLeft(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := testenv.DatabaseURL(t)
	const timeout, poll = 3 * time.Second, 1500 * time.Millisecond
	e, err := NewElector(Config{DatabaseURL: url, Slot: fmt.Sprintf("gone_%d", time.Now().UnixNano()), PollInterval: poll, KeepaliveInterval: 500 * time.Millisecond, Timeout: timeout},
		slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	conn, key, err := e.connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	if d := e.nextPoll(ctx, conn, key); d != poll {
		t.Errorf("next poll with a freshly idle holder: %s, want the poll interval %s", d, poll)
	}
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	if d := e.nextPoll(ctx, conn, key); d != overdueRetry {
		t.Errorf("next poll after the holder left: %s, want %s", d, overdueRetry)
	}
}
