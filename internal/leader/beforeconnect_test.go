package leader

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Each lock connect calls the hook on a copy: what it sets does not stick
// to the elector's template, and its error aborts the connect.
func TestBeforeConnectGetsACopy(t *testing.T) {
	boom := errors.New("no token")
	calls := 0
	e, err := NewElector(Config{DatabaseURL: "postgres://relay@127.0.0.1:1/app", Slot: "s",
		PollInterval: time.Second, KeepaliveInterval: time.Second, Timeout: 4 * time.Second,
		BeforeConnect: func(_ context.Context, cfg *pgconn.Config) error {
			calls++
			if cfg.Password != "" {
				t.Errorf("call %d sees password %q set by an earlier call", calls, cfg.Password)
			}
			if cfg.RuntimeParams["application_name"] != ApplicationName {
				t.Errorf("application_name %q", cfg.RuntimeParams["application_name"])
			}
			cfg.Password = "token"
			return boom
		}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := e.connect(context.Background()); !errors.Is(err, boom) {
			t.Fatalf("connect: %v, want the hook's error", err)
		}
	}
	if calls != 2 || e.conn.Password != "" {
		t.Fatalf("calls %d, template password %q", calls, e.conn.Password)
	}
}
