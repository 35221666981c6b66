package outboxdb

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The pool calls the hook at each connect, and its error fails it.
func TestSetBeforeConnect(t *testing.T) {
	pc, err := ParseConfig("postgres://relay@127.0.0.1:1/app?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("no password yet")
	var user string
	SetBeforeConnect(pc, func(_ context.Context, cfg *pgconn.Config) error {
		user = cfg.User
		return boom
	})
	if _, err := Connect(context.Background(), pc); !errors.Is(err, boom) {
		t.Fatalf("Connect: %v, want the hook's error", err)
	}
	if user != "relay" {
		t.Fatalf("hook saw user %q", user)
	}
	SetBeforeConnect(pc, nil) // nil leaves the pool's hook as it is
	if pc.BeforeConnect == nil {
		t.Fatal("SetBeforeConnect(nil) dropped the hook")
	}
}
