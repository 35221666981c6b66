package relay

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/slot"
)

// TestSlotGoneNamesRecover: a slot that vanished while the relay ran (also
// after a failover to a standby without it) is still ErrSlotNotFound, and the
// message names the fix, as a start on a lost slot does.
func TestSlotGoneNamesRecover(t *testing.T) {
	err := slotGone(fmt.Errorf("slot %q: %w", "s", slot.ErrSlotNotFound))
	if !errors.Is(err, slot.ErrSlotNotFound) {
		t.Fatalf("slotGone lost the cause: %v", err)
	}
	for _, want := range []string{"dropped while the relay ran", "promoted standby", `"outbox-relay recover"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not mention %q", err, want)
		}
	}
}
