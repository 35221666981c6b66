package relay

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestStoppedStarting: a start-up step that failed because the relay was
// told to stop (SIGTERM during start-up) is a clean stop, not a failure;
// the same error without a stop, or another error with one, is returned.
func TestStoppedStarting(t *testing.T) {
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	byStop := fmt.Errorf("read current database: %w", fmt.Errorf("timeout: context already done: %w", context.Canceled))
	other := errors.New("replication slot is lost")
	if err := stoppedStarting(stopped, byStop); err != nil {
		t.Errorf("stopped, error from the stop: %v, want nil", err)
	}
	if err := stoppedStarting(context.Background(), byStop); err != byStop {
		t.Errorf("not stopped: %v, want the error", err)
	}
	if err := stoppedStarting(stopped, other); err != other {
		t.Errorf("stopped, another error: %v, want it", err)
	}
}
