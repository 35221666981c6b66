//go:build testhooks

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relayopt"
	"github.com/outbox-relay/outbox-relay/relay"
)

// testOptions are the relay options of the test hooks set in the
// environment: testStatusHoldEnv (envcheck.go, where the check of unknown
// OUTBOX_RELAY_* variables allows it).
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
