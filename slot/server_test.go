package slot

import (
	"strings"
	"testing"
)

func TestPartitionRootErrorSaysHowToFix(t *testing.T) {
	err := (&PartitionRootError{Publication: "outbox_relay", Table: `"public"."outbox"`}).Error()
	for _, want := range []string{"lacks publish_via_partition_root", "outbox-relay migrate",
		`ALTER PUBLICATION "outbox_relay" SET (publish_via_partition_root = true)`, "reconcile"} {
		if !strings.Contains(err, want) {
			t.Errorf("error lacks %q: %s", want, err)
		}
	}
}
