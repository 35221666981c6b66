package slot

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// lingeringPrimary is a primary whose pg_log_standby_snapshot() blocks
// until its context ends and then takes a while to return, as a query
// finishing on a slow connection does. inside counts the calls running.
type lingeringPrimary struct {
	calls, inside atomic.Int32
}

func (p *lingeringPrimary) Exec(ctx context.Context, _ string, _ ...any) (pgconn.CommandTag, error) {
	p.calls.Add(1)
	p.inside.Add(1)
	defer p.inside.Add(-1)
	<-ctx.Done()
	time.Sleep(time.Second) // virtual time (synctest): passes once everything else blocks
	return pgconn.CommandTag{}, ctx.Err()
}

func (p *lingeringPrimary) QueryRow(context.Context, string, ...any) pgx.Row { return intRow(-1) }

// TestPrompterStopsWithCreation: the stop askPrimary returns waits for
// the prompter's goroutine, including a pg_log_standby_snapshot() still
// running on the primary, so no query of it outlives the slot's creation.
func TestPrompterStopsWithCreation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		primary := &lingeringPrimary{}
		stop, err := Config{Primary: primary}.askPrimary(context.Background(), StandbyVersion)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the prompter is inside its first call
		if n := primary.calls.Load(); n != 1 {
			t.Fatalf("%d calls before stop, want 1", n)
		}
		stop()
		if n := primary.inside.Load(); n != 0 {
			t.Fatalf("stop returned with %d pg_log_standby_snapshot() call(s) still running", n)
		}
	})
}
