//go:build !testhooks

package main

import "testing"

// TestReleaseBuildIgnoresTestHooks: only a -tags testhooks build reads
// OUTBOX_RELAY_TEST_STATUS_HOLD.
func TestReleaseBuildIgnoresTestHooks(t *testing.T) {
	t.Setenv(envPrefix+"TEST_STATUS_HOLD", "4s")
	if opts, err := testOptions(); len(opts) != 0 || err != nil {
		t.Fatalf("release build took test hooks: %v %v", opts, err)
	}
}
