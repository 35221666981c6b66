package replication

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The hook sees the replication session's configuration before anything
// is dialled, and its error aborts the connect, wrapped.
func TestWithBeforeConnect(t *testing.T) {
	boom := errors.New("token service down")
	var seen *pgconn.Config
	_, err := ConnectParams(context.Background(), "postgres://relay@127.0.0.1:1/app", map[string]string{"wal_sender_timeout": "5000"},
		WithBeforeConnect(func(_ context.Context, cfg *pgconn.Config) error {
			seen = cfg
			return boom
		}))
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the hook's", err)
	}
	if seen == nil || seen.User != "relay" || seen.RuntimeParams["replication"] != "database" ||
		seen.RuntimeParams["application_name"] != ApplicationName || seen.RuntimeParams["wal_sender_timeout"] != "5000" {
		t.Fatalf("hook saw %+v", seen)
	}
}
