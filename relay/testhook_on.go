//go:build testhooks

package relay

import (
	"fmt"
	"os"
	"time"
)

// TestStatusHoldEnv names the status-hold test hook (heldProgress), read
// by New in builds with -tags testhooks only (the integration suite's
// binary). Release builds have neither the variable nor the hook.
const TestStatusHoldEnv = "OUTBOX_RELAY_TEST_STATUS_HOLD"

// testHooks sets the test hooks from the environment.
func (o *options) testHooks() error {
	v := os.Getenv(TestStatusHoldEnv)
	if v == "" {
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%s=%q is not a duration", TestStatusHoldEnv, v)
	}
	o.statusHold = d
	return nil
}
