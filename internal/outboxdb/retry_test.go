package outboxdb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/testutil/testenv"
)

func TestTransient(t *testing.T) {
	pg := func(code, msg string) error {
		return fmt.Errorf("connect to PostgreSQL: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	for err, want := range map[error]bool{
		pg("57P03", "the database system is starting up"):                        true,
		pg("57P01", "terminating connection due to administrator command"):       true,
		pg("53300", "sorry, too many clients already"):                           true,
		pg("08006", "connection failure"):                                        true,
		pg("28P01", "password authentication failed"):                            false,
		pg("3D000", `database "nope" does not exist`):                            false,
		pg("42501", "permission denied to start WAL sender"):                     false,
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}:          true,
		fmt.Errorf("dial: %w", syscall.ECONNREFUSED):                             true,
		context.DeadlineExceeded:                                                 true,
		errors.New("tls: failed to verify certificate: x509: unknown authority"): false,
		// target_session_attrs found no writable server (yet): a standby
		// not promoted, or all hosts of a multi-host URL read-only.
		fmt.Errorf("ValidateConnect failed: %w", pgconn.ErrReadOnlyConnection):                                             true,
		errors.Join(fmt.Errorf("h1: %w", pgconn.ErrStandbyConnection), fmt.Errorf("h2: %w", pgconn.ErrReadOnlyConnection)): true,
	} {
		if got := Transient(err); got != want {
			t.Errorf("Transient(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestConnectRetryingWaitsForAnUnreachableServer: a closed port is
// retried, with a warning per attempt, until ctx ends. The port is refused
// once for real, outside the test's synctest bubble; inside it every
// attempt dials through a DialFunc returning that refusal (no socket), so
// the backoff and ctx's 2 s run on the fake clock.
func TestConnectRetryingWaitsForAnUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	_, refused := net.Dial("tcp", addr)
	if !errors.Is(refused, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, refused)
	}
	synctest.Test(t, func(t *testing.T) {
		pc, err := ParseConfig("postgres://u:pw@" + addr + "/db?sslmode=disable")
		if err != nil {
			t.Fatal(err)
		}
		pc.ConnConfig.LookupFunc = func(_ context.Context, host string) ([]string, error) { return []string{host}, nil }
		pc.ConnConfig.DialFunc = func(_ context.Context, network, a string) (net.Conn, error) {
			if network != "tcp" || a != addr {
				t.Errorf("dialed %s %s, want tcp %s", network, a, addr)
			}
			return nil, refused
		}
		var logs bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		pool, err := ConnectRetrying(ctx, pc, slog.New(slog.NewTextHandler(&logs, nil)))
		if pool != nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, %v; want ctx's error", pool, err)
		}
		if time.Since(start) < 1500*time.Millisecond {
			t.Fatalf("returned after %s, before ctx ended", time.Since(start))
		}
		if n := strings.Count(logs.String(), "PostgreSQL unreachable, retrying"); n < 2 ||
			!strings.Contains(logs.String(), "stage=startup") || !strings.Contains(logs.String(), "attempt=2") {
			t.Fatalf("%d retry warnings:\n%s", n, logs.String())
		}
	})
}

// TestConnectRetryingWaitsForAWritableServer: with target_session_attrs =
// read-write, a server that is read-only (here by default_transaction_read_only,
// as a standby is until promoted) is retried, not a reason to exit: a
// failover is under way.
func TestConnectRetryingWaitsForAWritableServer(t *testing.T) {
	pc, err := ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	pc.ConnConfig.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	var logs bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	pool, err := ConnectRetrying(ctx, pc, slog.New(slog.NewTextHandler(&logs, nil)))
	if pool != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, %v; want ctx's error after retrying\n%s", pool, err, logs.String())
	}
	if n := strings.Count(logs.String(), "PostgreSQL unreachable, retrying"); n < 2 || !strings.Contains(logs.String(), "read only connection") {
		t.Fatalf("%d retry warnings:\n%s", n, logs.String())
	}
}
