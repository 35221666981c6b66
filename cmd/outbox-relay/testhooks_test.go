//go:build testhooks

package main

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/relayopt"
)

func TestStatusHoldHook(t *testing.T) {
	t.Setenv(testStatusHoldEnv, "4s")
	opts, err := testOptions()
	if err != nil || len(opts) != 1 {
		t.Fatalf("options %v, %v", opts, err)
	}
	var o relayopt.Options
	opts[0](&o)
	if o.StatusHold.String() != "4s" {
		t.Fatalf("hold %s", o.StatusHold)
	}
	t.Setenv(testStatusHoldEnv, "soon")
	if _, err := testOptions(); err == nil {
		t.Fatal("malformed hold accepted")
	}
}
