//go:build testhooks

package relay

import "testing"

func TestStatusHoldHook(t *testing.T) {
	t.Setenv(TestStatusHoldEnv, "4s")
	var o options
	if err := o.testHooks(); err != nil || o.statusHold.String() != "4s" {
		t.Fatalf("hold %s, %v", o.statusHold, err)
	}
	t.Setenv(TestStatusHoldEnv, "soon")
	if err := (&options{}).testHooks(); err == nil {
		t.Fatal("malformed hold accepted")
	}
}
