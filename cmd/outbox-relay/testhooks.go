//go:build testhooks

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relayopt"
	"github.com/outbox-relay/outbox-relay/relay"
)

// testStatusHoldEnv names a test hook of binaries built with -tags
// testhooks (the integration suite's): standby status updates confirm only
// positions acknowledged at least that long ago, while checkpoints are
// saved as usual. It widens the (normally ~100 ms) window in which a
// checkpoint is ahead of the slot, so a kill -9 test can land in it
// deterministically. Not a flag, and not in release builds: it only makes
// redelivery worse.
const testStatusHoldEnv = envPrefix + "TEST_STATUS_HOLD"

// testOptions are the relay options of the test hooks set in the
// environment.
func testOptions() ([]relay.Option, error) {
	v := os.Getenv(testStatusHoldEnv)
	if v == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, fmt.Errorf("%s=%q is not a duration", testStatusHoldEnv, v)
	}
	return []relay.Option{func(o *relayopt.Options) { o.StatusHold = d }}, nil
}
