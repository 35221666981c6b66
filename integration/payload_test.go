//go:build integration

package integration

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// TestByteaPayload: a bytea payload column (binary formats) is relayed as
// the raw bytes, including NUL and non-UTF-8 bytes.
func TestByteaPayload(t *testing.T) {
	inSuites(t, parallel, stack)
	env := NewEnv(t, EnvOptions{NoMigrate: true})
	res := env.RunCLI(60*time.Second, []string{"OUTBOX_RELAY_PAYLOAD_TYPE=bytea"}, "migrate")
	if res.Code != 0 {
		t.Fatalf("migrate --payload-type bytea: exit %d\n%s", res.Code, res.Stderr)
	}
	relay := env.StartRelay()
	defer relay.Term(10 * time.Second)
	c := StartConsumer(t, env.Topic, env.Partitions)

	want := map[string][]byte{}
	for i := 0; i < 50; i++ {
		payload := []byte{0x00, 0xff, 0xfe, byte(i), '\\', 'x', 0x80}
		var id string
		err := env.DB.QueryRow(t.Context(), fmt.Sprintf(`insert into %s (event_id, aggregate_type, aggregate_id, aggregate_version,
			event_type, schema_version, payload) values (gen_random_uuid(), $1, $2, 1, 'blob.stored', 1, $3) returning event_id::text`,
			env.QuotedTable()), env.AggType, fmt.Sprintf("b-%d", i), payload).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = payload
	}
	ok := within(60*time.Second, 100*time.Millisecond, func() bool { return c.Count() >= len(want) })
	if !ok {
		t.Fatalf("delivered %d of %d", c.Count(), len(want))
	}
	for _, r := range c.Records() {
		p, found := want[r.EventID()]
		if !found {
			t.Fatalf("unexpected record %s", r.EventID())
		}
		if !bytes.Equal(r.Value, p) {
			t.Fatalf("event %s: value %x, want %x", r.EventID(), r.Value, p)
		}
	}
}
