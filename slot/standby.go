package slot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/startstop"
)

// StandbyVersion is the first server_version_num that decodes on a hot
// standby (PostgreSQL 16): the slot lives on the standby, which decodes
// the WAL it replays, and the primary only streams WAL.
const StandbyVersion = 160000

// InRecovery reports whether db is a standby (pg_is_in_recovery()).
func InRecovery(ctx context.Context, db DB) (bool, error) {
	var in bool
	if err := db.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&in); err != nil {
		return false, fmt.Errorf("read pg_is_in_recovery(): %w", err)
	}
	return in, nil
}

// snapshotEvery is how often Create asks the primary for a
// running-transactions record while a standby creates a slot.
const snapshotEvery = 200 * time.Millisecond

// askPrimary checks that a standby of version v can create a logical
// slot and starts the prompter (promptPrimary, a startstop service): until
// stop, which waits for its goroutine, it asks c.Primary every
// snapshotEvery for the running-transactions record the creation waits
// for: the primary writes one on its own only every 15 s when busy, and
// never when idle.
func (c Config) askPrimary(ctx context.Context, v int) (stop func(), err error) {
	if v < StandbyVersion {
		return nil, fmt.Errorf("the server is a standby of PostgreSQL %d.%d, which cannot decode: logical decoding on a standby needs PostgreSQL 16 or later; "+
			"decode on the primary (leave the replication URL unset) or upgrade", v/10000, v%10000)
	}
	if c.Primary == nil {
		return nil, errors.New("the server is a standby, and creating a logical slot there waits for a running-transactions record from the primary: " +
			"give the primary (slot.Config.Primary) so it can be asked for one (pg_log_standby_snapshot)")
	}
	prompter := startstop.New(c.promptPrimary)
	prompter.Start(ctx)
	return prompter.Stop, nil
}

// promptPrimary is the prompter's loop: it asks c.Primary for a
// running-transactions record now and every snapshotEvery until ctx ends.
// askPrimary's caller owns its goroutine and stops it (waiting for it)
// once the creation returned, so no query of it runs on the primary after.
func (c Config) promptPrimary(ctx context.Context) {
	t := time.NewTicker(snapshotEvery)
	defer t.Stop()
	for {
		// Best effort: a failure leaves the creation waiting for
		// the primary's own next record (every 15 s when busy).
		_, _ = c.Primary.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
